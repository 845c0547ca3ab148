"""Bad input ends with a one-line error naming the problem, the documented exit code
(docs/cli.md), no traceback, and never touches existing records."""
import subprocess
import sys
from pathlib import Path

import pytest

from mlir_ansor import tune
from mlir_ansor.errors import FrontendError, OutputError, ToolchainError, UsageError
from mlir_ansor.targets import host

ROOT = Path(__file__).resolve().parents[1]
MLP = f"{ROOT / 'tests' / 'data' / 'small_mlp.py'}:make"
KEEP = '{"keep": "me"}\n'


def run_cli(*args, cwd=ROOT, preexec=None):
    return subprocess.run([sys.executable, "-m", "mlir_ansor.tune", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900, preexec_fn=preexec)


@pytest.fixture()
def out(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "records.jsonl").write_text(KEEP)
    return out


def one_line_error(res, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), res.stderr
    assert sum(l.startswith("error:") for l in res.stderr.splitlines()) == 1
    return last


def untouched(out: Path) -> bool:
    return (out / "records.jsonl").read_text() == KEEP


def write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "m.py"
    f.write_text(text)
    return f


@pytest.mark.parametrize("args, says", [
    (["--trials", "-1"], "--trials: must be >= 0"),
    (["--trials", "many"], "--trials"),
    (["--batch", "0"], "--batch: must be >= 1"),
    (["--objective", "f9"], "--objective"),
    (["--objective", "f2"], "--latency-requirement-ms"),
    (["--early-stop", "-2"], "--early-stop"),
    (["--search-minutes", "-1"], "--search-minutes: must be >= 0, got -1"),
    (["--search-minutes", "nan"], "--search-minutes: must be >= 0, got nan"),
    (["--target", "tpu"], "unknown target 'tpu'"),
    (["--target", "cuda", "--dynamic", "x:0=1..8"], "writes an offline batch, which does "
                                                    "not take --dynamic"),
    (["--target", "cuda:sm_90", "--allow-unmeasured"], "does not take --allow-unmeasured"),
    (["--ssh", "box:x"], "--ssh box:x: expected [USER@]HOST[:PORT]"),
    (["--ssh", "box", "--ray", "auto"], "--ssh and --ray: choose one runner"),
    (["--ssh", "box", "--target", "cuda"], "the reference outputs are computed on this"),
    (["--allow-unmeasured"], "--allow-unmeasured is for a target this machine cannot run"),
    (["--target", "x86_64-avx512" if host().device_kind != "x86_64-avx512" else "x86_64-avx2"],
     "tuning needs a runner for that device"),
    (["--reuse", "nope.jsonl"], "records file to reuse not found: nope.jsonl"),
    (["--cost-model", "nope.json"], "cost model file not found: nope.json"),
    (["--cost-model", "README.md"], "cost model README.md: cannot be read"),
    (["--dynamic", "x:0=9..2"], "--dynamic x:0=9..2: LO 9 > HI 2"),
    (["--dynamic", "x0=1..8"], "expected INPUT:DIM=LO..HI"),
    (["--shape-weights", "README.md"], "--shape-weights needs --dynamic"),
    (["--size-samples", "1"], "--size-samples must be >= 2"),
    (["--dynamic", "x:0=1..8", "--shape-weights", "README.md"], "expected 'SIZE COUNT'"),
    (["--dynamic", "x:0=1..8", "--shape-weights", "nope.txt"], "cannot read it"),
])
def test_bad_options(out, args, says):
    err = one_line_error(run_cli("matmul_1024", *args, "--out", str(out)), UsageError.exit_code)
    assert says in err
    assert untouched(out)


def test_reuse_is_repeatable_and_keeps_the_model_argument(out, tmp_path):
    """`--reuse A --reuse B MODEL`: nargs used to swallow MODEL as a records file."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("")
    args = tune.parse_args(["--reuse", str(a), "--reuse", str(b), "mlp"])
    assert args.reuse == [a, b] and args.model == ["mlp"]
    err = one_line_error(run_cli("--reuse", str(a), "--reuse", str(b), "mlp", "--out", str(out)),
                         UsageError.exit_code)
    assert "b.jsonl" in err


def test_shape_weights_outside_the_range(out, tmp_path):
    w = tmp_path / "w.txt"
    w.write_text("4 10\n2048 1\n")
    err = one_line_error(run_cli("mlp", "--dynamic", "x:0=2..256", "--shape-weights", str(w),
                                 "--out", str(out)), UsageError.exit_code)
    assert "size 2048 of x_0 is outside 2..256" in err
    assert untouched(out)


def test_dynamic_specs_the_model_does_not_have(out):
    for spec, says in (("nope:0=1..8", "no input named 'nope'"),
                       ("0:5=1..8", "has 2 dimensions")):
        err = one_line_error(run_cli("mlp", "--dynamic", spec, "--out", str(out)),
                             FrontendError.exit_code)
        assert says in err
        assert untouched(out)


@pytest.mark.parametrize("source, spec, says", [
    (None, "no_such_example", "unknown model 'no_such_example'"),
    (None, "nowhere.py:f", "model file not found: nowhere.py"),
    ("\xff\xfe not python (\n", "{f}:make", "cannot load"),
    ("x = 1\n", "{f}:make_model", "no callable factory 'make_model'"),
    ("def make():\n    raise RuntimeError('weights missing')\n", "{f}:make",
     "model factory {f}:make failed: RuntimeError: weights missing"),
    ("def make():\n    return 42\n", "{f}:make", "must return (model, example_inputs)"),
    ("import torch\ndef make():\n    return torch.nn.ReLU(), [1, 2]\n", "{f}:make",
     "example_inputs must be a tuple of tensors"),
    ("import torch\n"
     "class M(torch.nn.Module):\n"
     "    def forward(self, x):\n"
     "        return torch.linalg.eigh(x)[0]\n"  # no linalg lowering in torch-mlir
     "def make():\n"
     "    return M(), (torch.randn(4, 4),)\n", "{f}:make", "cannot import the model"),
])
def test_bad_models(out, tmp_path, source, spec, says):
    f = write(tmp_path, source) if source is not None else None
    spec = spec.format(f=f)
    err = one_line_error(run_cli(spec, "--out", str(out)), FrontendError.exit_code)
    assert says.format(f=f) in err
    assert untouched(out)


def test_output_folder_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    err = one_line_error(run_cli("mlp", "--out", str(blocker / "out")), OutputError.exit_code)
    assert "cannot write to the output folder" in err


def test_output_disk_full_keeps_the_records(out):
    """Writing the first record fails (a file-size limit stands in for a full disk: the
    same OSError path): one line, exit 4, the earlier records intact."""
    import resource

    limit = 4 << 20
    (out / "records.jsonl").write_text(KEEP + "\n" * (limit - len(KEEP)))
    before = (out / "records.jsonl").read_text()

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    # (Data tiling off: where IREE's data tiling timed faster it took both matmuls, no
    # trial was measured and nothing was written: the CI run of 86a186d exited 0.)
    err = one_line_error(run_cli(MLP, "--trials", "2", "--batch", "1", "--data-tiling", "off",
                                 "--out", str(out), preexec=cap), OutputError.exit_code)
    assert "cannot append to" in err and "records.jsonl" in err
    assert (out / "records.jsonl").read_text() == before


def test_missing_iree_tools(out, monkeypatch, capsys):
    """In-process: the tools are looked up in an empty folder."""
    from mlir_ansor.tuner import toolchain

    real = toolchain._tool
    monkeypatch.setattr(toolchain, "_tool", lambda pkg_dir, name: real(out, name))
    code = tune.main(["mlp", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == ToolchainError.exit_code
    assert err[-1].startswith("error: IREE tool iree-compile not found")
    assert untouched(out)
