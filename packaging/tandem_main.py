"""Entry point of the bundled app: the same as `python -m app` (flags included)."""
import sys

from app.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
