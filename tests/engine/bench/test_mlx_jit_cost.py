"""engine.bench.mlx_jit_cost runs every trigger (each one op MLX compiles a module for on
CUDA); on the CPU nothing is compiled, so each says so."""
from engine.bench import mlx_jit_cost
from engine.core.chunk_pieces import on_cuda


def test_every_trigger_runs_and_names_what_it_compiled(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path))
    names = [n for n in mlx_jit_cost.triggers() if not n.endswith("_m512")]  # quick on a CPU
    mlx_jit_cost.run_serial(tmp_path, names)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == names
    if not on_cuda():       # on CUDA a line names the modules compiled (none if cached before)
        assert all(line.endswith("(nothing compiled)") for line in lines)


def test_in_parallel_each_trigger_is_a_process_of_its_own(tmp_path, capsys):
    mlx_jit_cost.run_parallel(tmp_path, ["q4g32_m8", "gather_bfloat16_int32"], workers=2)
    out = capsys.readouterr().out
    assert "# 2 triggers in 2 processes" in out
    # on CUDA each trigger's process compiles its module into the fresh cache (the H100
    # in session 48: 2); on the CPU nothing is compiled
    assert ("modules in" in out) if on_cuda() else ("0 modules" in out), out
