"""Issue 17 item 4: a script that ends without close(), or closes the engine from a
listener, exits cleanly (it used to abort with SIGABRT). Each runs in a subprocess."""
from __future__ import annotations

from reliability_util import run_script

PRELUDE = """
import sys
from engine import Engine, EngineConfig, SamplingParams
from engine.events import TokenEvent
e = Engine.load(sys.argv[1], EngineConfig(num_pages=64, page_size=4, max_context=4000))
"""


def check_clean(proc):
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "terminate called" not in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_exit_without_close_while_a_request_streams(tiny_folder):
    proc = run_script(PRELUDE + """
h = e.submit([1, 2, 3], SamplingParams(max_tokens=3000, temperature=0))
next(iter(h))
print("streaming")
""", str(tiny_folder))
    check_clean(proc)
    assert proc.stdout.strip() == "streaming"


def test_exit_without_close_while_idle(tiny_folder):
    check_clean(run_script(PRELUDE + "e.generate([[1, 2]])\n", str(tiny_folder)))


def test_close_from_a_listener(tiny_folder):
    proc = run_script(PRELUDE + """
def listener(ev):
    if isinstance(ev, TokenEvent):
        e.close()
e.add_listener(listener)
done = e.submit([1, 2, 3], SamplingParams(max_tokens=3000, temperature=0)).result(60)
print(done.finish_reason)
""", str(tiny_folder))
    check_clean(proc)
    assert proc.stdout.strip() == "cancelled"


def test_close_twice_and_from_another_thread(tiny_folder):
    proc = run_script(PRELUDE + """
import threading
h = e.submit([1, 2, 3], SamplingParams(max_tokens=3000, temperature=0))
next(iter(h))
t = threading.Thread(target=e.close)
t.start(); t.join()
e.close()
print(h.result(60).finish_reason)
""", str(tiny_folder))
    check_clean(proc)
    assert proc.stdout.strip() == "cancelled"
