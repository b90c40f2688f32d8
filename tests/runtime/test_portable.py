"""Portable libraries (issue 15, ``target="c -mcpu=portable"``): the op code at several
x86-64 levels in the one library, the best level this CPU has picked once at load
(``$MONOLIB_ISA_LEVEL`` lowers it), the glue at the architecture's baseline. Checked
here: the target's flags and units, the C check and pick on a faked CPU requirement,
each level's outputs against ONNX Runtime, and under ``qemu-x86_64 -cpu Nehalem`` (no
AVX) the portable library running through Python and the C API while a native AVX
library is refused by ``monolib_open`` with a message, never a signal."""

from __future__ import annotations

import ctypes
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_isa import NEHALEM, QEMU, _conv_gemm_model, _under_nehalem, needs_x86

import monolib
from monolib.export.csource import split_source
from monolib.export.objcache import ObjectCache
from monolib.export.targets import GLUE_LEVEL, Target
from monolib.export.toolchain import compile_objects, find_compiler, unit_level
from monolib.runtime import isa
from monolib.tools.inspect import _PlainConsole, inspect_library, render_report

INCLUDE = Path(__file__).resolve().parents[2] / "src" / "monolib" / "include"
LEVELS = ["x86-64-v2", "x86-64-v3", "x86-64-v4"]
# A C API driver: dlopen, the level that runs, monolib_open (REFUSED + the message,
# exit 3), input 0 from a file, run, output 0 (argv[4] bytes) to a file.
DRIVER_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "monolib.h"
#define SYM(n) (__typeof__(&monolib_##n))dlsym(h, "monolib_" #n)
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) { printf("NOLOAD %s\n", dlerror()); return 4; }
  const char* (*isa_level)(void) = SYM(isa_level);
  monolib_model* (*open)(void) = SYM(open);
  const char* (*last_error)(void) = SYM(last_error);
  int32_t (*set_input)(monolib_model*, int32_t, const void*, size_t) = SYM(set_input);
  int32_t (*run_model)(monolib_model*) = SYM(run_model);
  const void* (*output_data)(const monolib_model*, int32_t) = SYM(output_data);
  (void)argc;
  printf("LEVEL %s\n", isa_level());
  fflush(stdout);
  monolib_model* m = open();
  if (m == NULL) { printf("REFUSED %s\n", last_error()); return 3; }
  float in[4096];
  FILE* f = fopen(argv[2], "rb");
  size_t n = fread(in, 1, sizeof in, f);
  fclose(f);
  if (set_input(m, 0, in, n) != 0 || run_model(m) != 0) {
    printf("FAILED %s\n", last_error()); return 1;
  }
  f = fopen(argv[3], "wb");
  fwrite(output_data(m, 0), 1, (size_t)atoi(argv[4]), f);
  fclose(f);
  printf("RAN\n");
  return 0;
}
"""


def test_target_levels_and_flags():
    t = Target("c -mcpu=portable")
    assert t.portable and str(t) == "c -mcpu=portable"
    if t.arch == "x86_64":
        assert t.levels == tuple(LEVELS)
        assert [t.cflags(lv) for lv in t.levels] == [["-O3", f"-march={lv}"] for lv in LEVELS]
        assert t.cflags() == ["-O3", "-march=x86-64-v2"]  # the baseline
    assert Target("c -mcpu=native -mattr=+avx2").cflags(GLUE_LEVEL)[:1] == ["-O3"]
    x86 = Target("c -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3 -mattr=+avx512f")
    assert x86.cflags(GLUE_LEVEL) == ["-O3", "-march=x86-64"]  # no -mattr in the glue
    arm = Target("c -mtriple=aarch64-linux-gnu -mcpu=portable")
    assert arm.levels == ("",) and arm.cflags() == ["-O3"]  # one level: armv8-a + NEON
    assert not Target("c").portable and Target("c").levels == ("",)


@needs_x86
def test_units_per_level_and_cached_apart(tmp_path):
    factory = monolib.compile(_conv_gemm_model(), target="c -mcpu=portable")
    src = factory.imported_modules[0].source
    units = split_source(src, 1, "c -mcpu=portable")  # one job: still split, per level
    levels = [unit_level(u.encode()) for u in units]
    assert levels[-1] == GLUE_LEVEL and set(levels[:-1]) == set(LEVELS)
    per = {lv: [u for u, x in zip(units, levels) if x == lv] for lv in LEVELS}
    assert len({len(v) for v in per.values()}) == 1  # the same units at every level
    assert "#define op_0 op_0_L1\n" in per["x86-64-v3"][0]
    glue = units[-1]
    assert "op_0_L2(params, arena)" in glue and "ml_isa_level" in glue
    assert "monolib_isa_level" in glue and "ML_ISA_CHECK" in glue
    # compiled: each level with its flags, cached apart (the text and the flags differ)
    files = []
    for k, u in enumerate(units):
        files.append(str(tmp_path / f"u{k}.c"))
        Path(files[-1]).write_text(u)
    cache = ObjectCache(str(tmp_path / "cache"))
    objs = compile_objects(files, "c -mcpu=portable", cwd=str(tmp_path), jobs=2, cache=cache)
    stored = sum(len(f) for _, _, f in os.walk(tmp_path / "cache"))
    assert stored == len(objs) == len(units)
    nm = subprocess.run(["nm", objs[0]], capture_output=True, text=True, check=True).stdout
    assert "op_0_L" in nm or "_k_L" in nm, nm[:500]


def _c_check_exe(tmp_path, record: dict, name: str) -> Path:
    """A program of the glue's C check and pick for ``record``: prints the level and
    ml_isa_refusal() (or OK)."""
    main = textwrap.dedent("""
        #include <stdio.h>
        int main(void) {
          const char* why = ml_isa_refusal();
          printf("LEVEL %s\\n%s\\n", monolib_isa_level(), why ? why : "OK");
          return 0;
        }
    """)
    src = tmp_path / f"{name}.c"
    src.write_text(isa.glue_source(record) + main)
    exe = tmp_path / name
    cc = find_compiler("c")
    subprocess.run([*cc, "-O2", "-march=x86-64", "-o", str(exe), str(src)], check=True)
    return exe


@needs_x86
def test_c_check_names_missing_features_and_picks_a_level(tmp_path):
    have = isa.host_features()
    lacking = sorted(set(isa._CPUID) - set(have))
    if not lacking:
        pytest.skip("this CPU has every feature monolib records")
    need = sorted(NEHALEM) + lacking[:2]
    exe = _c_check_exe(tmp_path, isa.make_record("x86_64", need, ["-march=fake"]), "fake")
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert "lacks feature(s) " + ", ".join(lacking[:2]) + " that" in out, out
    assert "-march=fake" in out and "sse4.2" not in out.split("needs")[0], out
    # what this CPU has: no refusal; the pick of a portable record, lowered by the env
    rec = isa.make_record("x86_64", sorted(NEHALEM), ["-march=x86-64-v2"], LEVELS)
    exe = _c_check_exe(tmp_path, rec, "pick")
    best = isa.level_of("x86_64", have)
    for env, want in [(None, best), ("v2", "x86-64-v2"), ("x86-64-v3", min(best, "x86-64-v3")),
                      ("v9", best), ("", best)]:
        envs = {k: v for k, v in os.environ.items() if k != "MONOLIB_ISA_LEVEL"}
        if env is not None:
            envs["MONOLIB_ISA_LEVEL"] = env
        out = subprocess.run([str(exe)], capture_output=True, text=True, env=envs,
                             check=True).stdout
        assert out.splitlines() == [f"LEVEL {want}", "OK"], (env, out)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """The conv+gemm model exported portable and native, its input and ORT's output."""
    from monolib.compiler.testing import ort_run

    tmp = tmp_path_factory.mktemp("portable")
    model = _conv_gemm_model()
    x = np.random.default_rng(1).normal(size=(1, 3, 5, 7)).astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    out = {"x": x, "want": want, "tmp": tmp}
    for name, target in [("portable", "c -mcpu=portable"), ("native", "c")]:
        out[name] = monolib.compile(model, target=target).export_library(str(tmp / f"{name}.so"))
    (tmp / "x.bin").write_bytes(x.tobytes())
    return out


@pytest.fixture(scope="module")
def driver(libs):
    exe = libs["tmp"] / "driver"
    src = libs["tmp"] / "driver.c"
    src.write_text(DRIVER_C)
    cc = find_compiler("c")
    subprocess.run([*cc, "-O2", "-march=x86-64", f"-I{INCLUDE}", "-o", str(exe), str(src), "-ldl"],
                   check=True)
    return exe


def _drive(driver, libs, lib: str, env: dict | None = None, qemu: bool = False):
    out = libs["tmp"] / "y.bin"
    if out.exists():
        out.unlink()
    cmd = [str(driver), lib, str(libs["tmp"] / "x.bin"), str(out), str(libs["want"].nbytes)]
    if qemu:
        cmd = [QEMU, "-cpu", "Nehalem", *cmd]
    envs = {k: v for k, v in os.environ.items() if k != "MONOLIB_ISA_LEVEL"}
    envs.update(env or {})
    res = subprocess.run(cmd, capture_output=True, text=True, env=envs, timeout=300, check=False)
    y = (np.frombuffer(out.read_bytes(), np.float32).reshape(libs["want"].shape)
         if out.exists() else None)
    return res, y


def _level(lib: str) -> str:
    fn = ctypes.CDLL(lib).monolib_isa_level
    fn.restype = ctypes.c_char_p
    return fn().decode()


@needs_x86
def test_portable_library_picks_the_best_level_and_matches_ort(libs, capsys):
    rec = inspect_library(libs["portable"])["isa"]
    assert rec["levels"] == LEVELS and rec["level"] == "x86-64-v2"
    assert set(rec["features"]) == NEHALEM and rec["flags"] == ["-march=x86-64-v2"]
    render_report(inspect_library(libs["portable"]), _PlainConsole())
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ISA:"))
    assert "op code at x86-64-v2, x86-64-v3, x86-64-v4" in line, line
    best = isa.level_of("x86_64", isa.host_features())
    assert best in ("x86-64-v3", "x86-64-v4"), best  # the CPUs this suite runs on
    gm = monolib.GraphModule(monolib.load_module(libs["portable"])["default"](monolib.cpu()))
    gm.set_input("x", libs["x"])
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), libs["want"], rtol=1e-4, atol=1e-4)
    assert _level(libs["portable"]) == best  # the library Python loaded, same process
    assert _level(libs["native"]) == inspect_library(libs["native"])["isa"]["level"]


@needs_x86
@pytest.mark.parametrize("level", LEVELS)
def test_each_level_matches_ort_through_the_c_api(libs, driver, level):
    best = isa.level_of("x86_64", isa.host_features())
    res, y = _drive(driver, libs, libs["portable"], {"MONOLIB_ISA_LEVEL": level[-2:]})
    assert res.returncode == 0 and "RAN" in res.stdout, res.stdout + res.stderr
    assert f"LEVEL {min(level, best)}" in res.stdout, res.stdout  # never above the CPU
    np.testing.assert_allclose(y, libs["want"], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@needs_x86
@pytest.mark.skipif(QEMU is None, reason="qemu-x86_64 not installed (apt-get install qemu-user)")
def test_under_nehalem_portable_runs_native_refuses_cleanly(libs, driver, tmp_path):
    needs = set(inspect_library(libs["native"])["isa"]["features"])
    res, y = _drive(driver, libs, libs["portable"], qemu=True)
    assert res.returncode == 0 and "LEVEL x86-64-v2" in res.stdout, res.stdout + res.stderr
    np.testing.assert_allclose(y, libs["want"], rtol=1e-4, atol=1e-4)
    res, _ = _under_nehalem(tmp_path, libs["portable"], libs["x"])  # Python's load_module
    assert res.returncode == 0 and "RAN" in res.stdout, res.stdout + res.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), libs["want"], rtol=1e-4, atol=1e-4)
    if needs <= NEHALEM:
        pytest.skip("this host's native build needs nothing a Nehalem lacks")
    res, y = _drive(driver, libs, libs["native"], qemu=True)
    # monolib_open's message and exit 3; a SIGILL would be returncode -4
    assert res.returncode == 3 and y is None, (res.returncode, res.stdout, res.stderr[-2000:])
    assert "REFUSED monolib_open: this CPU lacks feature(s) " in res.stdout, res.stdout
    assert "avx2" in res.stdout and "sse4.2" not in res.stdout.split("lacks")[1].split("that")[0]
