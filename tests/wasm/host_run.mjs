// The JavaScript side of tests/wasm/test_wasm_js.py, shared by Node (node_driver.mjs) and
// Chromium (page.html): load a .wasm with monolib.mjs as a spec says, run it, report.
//
// spec: {mjs, model, input: {name, file, dims}, publicKey?, signature?, checks?: [...]}
// paths/URLs are read with `read` (fs in Node, fetch in a browser). The report holds the
// inputs/outputs info, each output as base64 bytes with its dims, and for each check
// the Error thrown ({name, message}) or null.

function b64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 32768) s += String.fromCharCode(...bytes.subarray(i, i + 32768));
  return btoa(s);
}

function thrown(e) {
  return { name: e.name, message: e.message, isError: e instanceof Error, ctor: e.constructor.name };
}

export async function runSpec(spec, read) {
  const { loadModel } = await import(spec.mjs);
  const report = { checks: {} };
  const opts = {};
  if (spec.publicKey) opts.publicKey = spec.publicKey;
  if (spec.signature) opts.signature = spec.signature;
  let model;
  try {
    model = await loadModel(spec.model, opts);
  } catch (e) {
    report.loadError = thrown(e);
    return report;
  }
  report.inputs = model.inputs;
  report.outputs = model.outputs;
  const raw = await read(spec.input.file);
  const x = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
  const out = model.run({ [spec.input.name]: { data: x, dims: spec.input.dims } });
  report.result = {};
  for (const [name, t] of Object.entries(out)) {
    report.result[name] = { dims: t.dims, type: t.type, b64: b64(new Uint8Array(t.data.buffer)) };
  }
  for (const check of spec.checks || []) {
    try {
      if (check === "bad_shape") {
        const dims = spec.input.dims.slice();
        dims[dims.length - 1] = 100;
        model.run({ [spec.input.name]: { data: new Float32Array(dims.reduce((a, b) => a * b, 1)), dims } });
      } else if (check === "wrong_type") {
        model.run({ [spec.input.name]: { data: new Int32Array(x.length), dims: spec.input.dims } });
      } else if (check === "short_data") {
        model.run({ [spec.input.name]: { data: x.subarray(1), dims: spec.input.dims } });
      } else if (check === "trap") {
        model.call("monolib_run", 0xffffff00 | 0, 0xffffff00 | 0); // params, arena past memory
      }
      report.checks[check] = null;
    } catch (e) {
      report.checks[check] = thrown(e);
    }
  }
  if ((spec.checks || []).includes("trap")) { // the module still runs after a trap
    const again = model.run({ [spec.input.name]: { data: x, dims: spec.input.dims } });
    const name = model.outputs[0].name;
    report.afterTrap = b64(new Uint8Array(again[name].data.buffer)) === report.result[name].b64;
  }
  model.close();
  return report;
}
