"""The benchmarks are tools, not the product: no product module imports them.

Product = app/, engine/ without engine/bench/, kernels/ without kernels/bench/.
The one sanctioned door is engine/terminal/cli.py's run_bench, which imports engine.bench
inside the function, only when ``python -m engine bench`` was chosen.
"""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ("engine.bench", "kernels.bench")
PRODUCT = ("app", "engine", "kernels")
# (file, function) where a lazy import of the bench is allowed.
DOORS = {("engine/terminal/cli.py", "run_bench")}


def _is_bench(name: str) -> bool:
    return any(name == b or name.startswith(b + ".") for b in BENCH)


def _product_files() -> list[Path]:
    out = []
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(("engine/bench/", "kernels/bench/")):
                out.append(path)
    return out


def _bench_imports(tree: ast.AST):
    """(imported name, enclosing function or None) for every import naming the bench."""
    found = []

    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef,
                                                      ast.AsyncFunctionDef)) else func
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
            elif (isinstance(child, ast.Call) and getattr(child.func, "attr", "")
                  in ("import_module", "run_module") and child.args
                  and isinstance(child.args[0], ast.Constant)):
                names = [str(child.args[0].value)]
            found.extend((n, func) for n in names if _is_bench(n))
            visit(child, inner)
    visit(tree, None)
    return found


def test_no_product_module_imports_the_bench():
    files = _product_files()
    assert len(files) > 50                              # the walk found the product
    offenders = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        for name, func in _bench_imports(ast.parse(path.read_text(), rel)):
            if (rel, func) not in DOORS:
                offenders.append(f"{rel}: {name} (in {func or 'module scope'})")
    assert not offenders, "the product imports the bench:\n" + "\n".join(offenders)


def test_the_checker_sees_every_import_form():
    """A planted import of each kind is caught (the check can fail)."""
    src = ("import engine.bench\n"
           "from kernels.bench import common\n"
           "from engine import bench\n"
           "def f():\n    import importlib\n    importlib.import_module('engine.bench.suite')\n")
    names = {n for n, _ in _bench_imports(ast.parse(src))}
    assert names >= {"engine.bench", "kernels.bench", "engine.bench.suite"}
    assert ("engine.bench.suite", "f") in _bench_imports(ast.parse(src))


def test_the_engine_cli_loads_no_bench_until_asked():
    code = ("import sys, engine.__main__, engine.terminal.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith(('engine.bench', "
            "'kernels.bench'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT), "PATH": ""}, check=True)
    assert out.stdout.strip() == "[]"
