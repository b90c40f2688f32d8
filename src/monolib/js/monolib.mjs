// monolib.mjs: run a model compiled by monolib to WebAssembly, in a browser or in Node >= 18.
//
//   monolib compile model.onnx -o model.wasm --shape x=1,3,48,192 --target "c -mtriple=wasm32-wasi"
//   monolib js > monolib.mjs
//
//   import { loadModel } from "./monolib.mjs";
//   const model = await loadModel("model.wasm");          // URL, path (Node), bytes or Response
//   model.inputs;   // [{name, type: "float32", dims: [1, 3, 48, 192], lo, hi, step}]
//   const out = model.run({ x: { data: new Float32Array(1 * 3 * 48 * 192), dims: [1, 3, 48, 192] } });
//   out[model.outputs[0].name];                          // {data: Float32Array, dims, type}
//
// The .wasm exports the C API of monolib.h (docs/c_api.md, docs/wasm.md); this module is
// a thin host over it: no bundler, no dependency. Errors of the C API (a bad input shape,
// out of memory) are thrown as JavaScript Errors carrying monolib_last_error()'s message;
// a trap (WebAssembly.RuntimeError) is caught and thrown as an Error naming the function.
// With {publicKey}, the file's detached Ed25519 signature (monolib sign: model.wasm.sig)
// is checked with WebCrypto over the exact bytes BEFORE they are compiled.

const TENSOR_INFO_BYTES = 48; // sizeof(monolib_tensor_info) on wasm32 (docs/wasm.md)
const WASI = "wasi_snapshot_preview1";
const SIG_FORMAT = "monolib.signature";
const SIG_DOMAIN = "monolib.signature.v1\0ed25519\0"; // runtime/trust.py: signed_message

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array, float16: Uint16Array,
  bfloat16: Uint16Array,
};

const isNode = typeof process !== "undefined" && !!(process.versions && process.versions.node);
const utf8 = new TextDecoder("utf-8");
const utf8enc = new TextEncoder();

/** An Error thrown by monolib.mjs; `.name` is "MonolibError". */
export class MonolibError extends Error {
  constructor(message) {
    super(message);
    this.name = "MonolibError";
  }
}

class WasiExit extends Error {
  constructor(code) {
    super(`the module called proc_exit(${code})`);
    this.code = code;
  }
}

// WebCrypto: the global in browsers and Node >= 19; node:crypto's in Node 18 (there the
// global needs --experimental-global-webcrypto). null without it (an insecure page).
let webcrypto = null;
async function getCrypto() {
  if (webcrypto) return webcrypto;
  if (globalThis.crypto && globalThis.crypto.subtle) webcrypto = globalThis.crypto;
  else if (isNode) webcrypto = (await import("node:crypto")).webcrypto;
  return webcrypto;
}

// ------------------------------------------------------------------------ bytes in
async function readBytes(src) {
  if (src instanceof ArrayBuffer) return new Uint8Array(src);
  if (ArrayBuffer.isView(src)) return new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
  if (typeof Response !== "undefined" && src instanceof Response) return responseBytes(src, "response");
  const where = String(src);
  if (isNode && !/^(https?|data|blob):/i.test(where)) {
    const { readFile } = await import("node:fs/promises");
    const path = /^file:/i.test(where) ? new URL(where) : where;
    try {
      return new Uint8Array(await readFile(path));
    } catch (e) {
      throw new MonolibError(`${where}: cannot read: ${e.message}`);
    }
  }
  let resp;
  try {
    resp = await fetch(src);
  } catch (e) {
    throw new MonolibError(`${where}: cannot fetch: ${e.message}`);
  }
  return responseBytes(resp, where);
}

async function responseBytes(resp, where) {
  if (!resp.ok) throw new MonolibError(`${where}: HTTP ${resp.status} ${resp.statusText}`);
  return new Uint8Array(await resp.arrayBuffer());
}

// ------------------------------------------------------------------------ signature
function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function unhex(s, what) {
  if (typeof s !== "string" || !/^([0-9a-fA-F]{2})*$/.test(s)) {
    throw new MonolibError(`signature: field '${what}' is not hex`);
  }
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function b64decode(s) {
  let bin;
  try {
    bin = atob(s);
  } catch {
    throw new MonolibError("signature: field 'signature' is not valid base64");
  }
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

// PEM (SubjectPublicKeyInfo, what `monolib keygen` writes to key.pub), 32 raw bytes, or
// a CryptoKey -> a WebCrypto Ed25519 verify key and its raw bytes.
async function importPublicKey(key) {
  const wc = await getCrypto();
  const subtle = wc && wc.subtle;
  if (!subtle) throw new MonolibError("signature check needs WebCrypto (crypto.subtle): a secure context");
  const alg = { name: "Ed25519" };
  let ck;
  try {
    if (typeof CryptoKey !== "undefined" && key instanceof CryptoKey) ck = key;
    else if (typeof key === "string" && key.includes("-----BEGIN")) {
      if (/PRIVATE KEY/.test(key)) throw new MonolibError("publicKey: a private key; give the public key (.pub)");
      const body = key.replace(/-----[^-]+-----/g, "").replace(/\s+/g, "");
      ck = await subtle.importKey("spki", b64decode(body), alg, true, ["verify"]);
    } else {
      const raw = typeof key === "string" ? unhex(key, "publicKey") : await readBytes(key);
      if (raw.length !== 32) throw new MonolibError(`publicKey: ${raw.length} bytes; an Ed25519 key has 32`);
      ck = await subtle.importKey("raw", raw, alg, true, ["verify"]);
    }
  } catch (e) {
    if (e instanceof MonolibError) throw e;
    throw new MonolibError(`publicKey: not a usable Ed25519 public key: ${e.message}`);
  }
  return { key: ck, raw: new Uint8Array(await subtle.exportKey("raw", ck)) };
}

async function sigDocument(signature, where) {
  if (signature && typeof signature === "object" && !ArrayBuffer.isView(signature)
      && !(signature instanceof ArrayBuffer) && !(typeof Response !== "undefined" && signature instanceof Response)
      && !(signature instanceof URL)) return signature;
  let text = signature;
  if (typeof signature !== "string" || !signature.trimStart().startsWith("{")) {
    text = utf8.decode(await readBytes(signature));
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new MonolibError(`${where}.sig: signature is not valid JSON: ${e.message}`);
  }
}

/**
 * Check that `bytes` carry a valid monolib signature (runtime/trust.py's format) by
 * `publicKey`; throws a MonolibError saying why not.
 * @param {Uint8Array} bytes the whole .wasm file
 * @param {object|string|Uint8Array} signature the .sig document, its JSON, or its URL/path
 * @param {string|Uint8Array|CryptoKey} publicKey PEM of key.pub, 32 raw bytes (or 64 hex), or a CryptoKey
 * @returns {Promise<{keyId: string, sha256: string, size: number}>}
 */
export async function verifySignature(bytes, signature, publicKey, where = "<bytes>") {
  const { key, raw } = await importPublicKey(publicKey);
  const doc = await sigDocument(signature, where);
  if (doc.format !== SIG_FORMAT || doc.version !== 1 || doc.algorithm !== "ed25519") {
    throw new MonolibError(`${where}.sig: not a monolib ed25519 signature (format ${doc.format}, version ${doc.version})`);
  }
  const subtle = (await getCrypto()).subtle;
  const digest = new Uint8Array(await subtle.digest("SHA-256", bytes));
  if (doc.size !== bytes.length || hex(digest) !== String(doc.sha256).toLowerCase()) {
    throw new MonolibError(`${where}: the library does not match its signature: it was modified after signing `
      + `(${bytes.length} bytes, sha256 ${hex(digest).slice(0, 16)}...; signed: ${doc.size} bytes, `
      + `sha256 ${String(doc.sha256).slice(0, 16)}...)`);
  }
  const keyId = hex(new Uint8Array(await subtle.digest("SHA-256", raw))).slice(0, 16);
  if (hex(unhex(doc.public_key, "public_key")) !== hex(raw)) {
    throw new MonolibError(`${where}: signed by key ${doc.key_id}, which is not the trusted key ${keyId}`);
  }
  const msg = new Uint8Array(SIG_DOMAIN.length + 40);
  msg.set(utf8enc.encode(SIG_DOMAIN), 0);
  msg.set(digest, SIG_DOMAIN.length);
  new DataView(msg.buffer).setBigUint64(SIG_DOMAIN.length + 32, BigInt(bytes.length), true);
  let ok;
  try {
    ok = await subtle.verify({ name: "Ed25519" }, key, b64decode(doc.signature), msg);
  } catch (e) {
    throw new MonolibError(`${where}: signature check failed: ${e.message}`);
  }
  if (!ok) {
    throw new MonolibError(`${where}: INVALID signature for key ${keyId}: the signature file was forged or altered`);
  }
  return { keyId, sha256: hex(digest), size: bytes.length };
}

// ------------------------------------------------------------------------ WASI shim
// Only what a model's module may import (docs/wasm.md: the PP-OCR models import none):
// stdout/stderr writes, exit, clocks, randomness, an empty environment and argv, no files.
function wasiImports(getMemory, names) {
  const ESUCCESS = 0, EBADF = 8, EINVAL = 28;
  const lines = { 1: "", 2: "" };
  const view = () => new DataView(getMemory().buffer);
  const write = (fd, text) => {
    lines[fd] += text;
    let nl;
    while ((nl = lines[fd].indexOf("\n")) >= 0) {
      (fd === 1 ? console.log : console.error)(lines[fd].slice(0, nl));
      lines[fd] = lines[fd].slice(nl + 1);
    }
  };
  const fns = {
    fd_write(fd, iovs, iovsLen, nwritten) {
      if (fd !== 1 && fd !== 2) return EBADF;
      const dv = view();
      let n = 0;
      for (let i = 0; i < iovsLen; i++) {
        const p = dv.getUint32(iovs + 8 * i, true), len = dv.getUint32(iovs + 8 * i + 4, true);
        write(fd, utf8.decode(new Uint8Array(getMemory().buffer, p, len)));
        n += len;
      }
      dv.setUint32(nwritten, n, true);
      return ESUCCESS;
    },
    fd_close: (fd) => (fd <= 2 ? ESUCCESS : EBADF),
    fd_seek: () => EBADF,
    fd_read: () => EBADF,
    fd_fdstat_get(fd, out) {
      if (fd > 2) return EBADF;
      const dv = view();
      for (let i = 0; i < 24; i++) dv.setUint8(out + i, 0);
      dv.setUint8(out, 2); // filetype: character device
      return ESUCCESS;
    },
    fd_prestat_get: () => EBADF, // no preopened directories: no file system
    fd_prestat_dir_name: () => EBADF,
    proc_exit(code) {
      throw new WasiExit(code);
    },
    clock_time_get(id, _precision, out) {
      const ns = id === 0 ? BigInt(Date.now()) * 1000000n
        : BigInt(Math.round((globalThis.performance ? performance.now() : Date.now()) * 1e6));
      if (id > 3) return EINVAL;
      view().setBigUint64(out, ns, true);
      return ESUCCESS;
    },
    clock_res_get(id, out) {
      if (id > 3) return EINVAL;
      view().setBigUint64(out, 1000n, true);
      return ESUCCESS;
    },
    random_get(p, len) {
      for (let off = 0; off < len; off += 65536) { // getRandomValues' limit per call
        webcrypto.getRandomValues(new Uint8Array(getMemory().buffer, p + off, Math.min(65536, len - off)));
      }
      return ESUCCESS;
    },
    environ_sizes_get(count, size) {
      const dv = view();
      dv.setUint32(count, 0, true);
      dv.setUint32(size, 0, true);
      return ESUCCESS;
    },
    environ_get: () => ESUCCESS,
    args_sizes_get(count, size) {
      const dv = view();
      dv.setUint32(count, 0, true);
      dv.setUint32(size, 0, true);
      return ESUCCESS;
    },
    args_get: () => ESUCCESS,
    sched_yield: () => ESUCCESS,
  };
  const out = {};
  for (const name of names) {
    if (!Object.hasOwn(fns, name)) throw new MonolibError(`the module imports ${WASI}.${name}, which monolib.mjs does not provide`);
    out[name] = fns[name];
  }
  return out;
}

// the import object of exactly what `module` imports; anything else is refused at load
async function imports(module, getMemory) {
  const wanted = WebAssembly.Module.imports(module);
  if (wanted.some((i) => i.name === "random_get") && !(await getCrypto())) {
    throw new MonolibError("the module imports random_get: it needs WebCrypto (crypto.getRandomValues)");
  }
  const bad = wanted.filter((i) => i.module !== WASI || i.kind !== "function");
  if (bad.length) {
    throw new MonolibError("the module imports what monolib.mjs does not provide: "
      + bad.map((i) => `${i.module}.${i.name} (${i.kind})`).join(", "));
  }
  return wanted.length ? { [WASI]: wasiImports(getMemory, wanted.map((i) => i.name)) } : {};
}

// ------------------------------------------------------------------------ the model
function typeOf(name) {
  if (name in ARRAYS) return ARRAYS[name];
  return Uint8Array; // strings ("S<n>") and dtypes JavaScript has no array for: raw bytes
}

/**
 * Load a monolib .wasm and open it (one handle: one arena, allocated once).
 * @param {string|URL|ArrayBuffer|ArrayBufferView|Response} urlOrBytes the .wasm: a URL
 *   (fetched), a file path or file: URL in Node, its bytes, or a fetch Response
 * @param {object} [options]
 * @param {string|Uint8Array|CryptoKey} [options.publicKey] check the detached signature
 *   with this Ed25519 key before compiling (PEM of `monolib keygen`'s key.pub, raw bytes)
 * @param {object|string|Uint8Array|URL} [options.signature] the .sig (document, JSON text,
 *   bytes or URL/path); default: urlOrBytes + ".sig" when urlOrBytes is a URL or path
 * @returns {Promise<{inputs: object[], outputs: object[], run: Function, close: Function}>}
 */
export async function loadModel(urlOrBytes, { publicKey, signature } = {}) {
  const where = typeof urlOrBytes === "string" || urlOrBytes instanceof URL ? String(urlOrBytes) : "<bytes>";
  let module;
  let verified = null;
  if (publicKey !== undefined && publicKey !== null) {
    const bytes = await readBytes(urlOrBytes);
    let sig = signature;
    if (sig === undefined) {
      if (where === "<bytes>") throw new MonolibError("loadModel: publicKey given for bytes without a signature");
      sig = where + ".sig";
    }
    verified = await verifySignature(bytes, sig, publicKey, where);
    module = await compile(bytes, where);
  } else if (where !== "<bytes>" && !(isNode && !/^(https?|data|blob):/i.test(where))
             && typeof WebAssembly.compileStreaming === "function") {
    let resp;
    try {
      resp = await fetch(urlOrBytes);
    } catch (e) {
      throw new MonolibError(`${where}: cannot fetch: ${e.message}`);
    }
    if (!resp.ok) throw new MonolibError(`${where}: HTTP ${resp.status} ${resp.statusText}`);
    // streaming compile overlaps the download; needs Content-Type application/wasm
    module = /application\/wasm/.test(resp.headers.get("Content-Type") || "")
      ? await compile(resp, where) : await compile(await responseBytes(resp, where), where);
  } else {
    module = await compile(await readBytes(urlOrBytes), where);
  }
  return Model.open(module, where, verified);
}

async function compile(src, where) {
  try {
    return src instanceof Uint8Array ? await WebAssembly.compile(src) : await WebAssembly.compileStreaming(src);
  } catch (e) {
    throw new MonolibError(`${where}: not a valid WebAssembly module: ${e.message}`);
  }
}

class Model {
  static async open(module, where, verified) {
    const m = new Model();
    m.where = where;
    m.verified = verified;
    m.module = module;
    let inst;
    try {
      inst = await WebAssembly.instantiate(module, await imports(module, () => m.memory));
    } catch (e) {
      if (e instanceof MonolibError) throw e;
      throw new MonolibError(`${where}: cannot instantiate: ${e.message}`);
    }
    m.x = inst.exports;
    m.memory = m.x.memory;
    for (const f of ["monolib_open", "monolib_last_error", "malloc", "free", "monolib_run_model"]) {
      if (typeof m.x[f] !== "function") throw new MonolibError(`${where}: exports no ${f}: not a monolib .wasm`);
    }
    if (m.x._initialize) m.call("_initialize");
    m.handle = m.call("monolib_open");
    if (!m.handle) throw m.error("monolib_open");
    m.scratch = m.call("malloc", TENSOR_INFO_BYTES + 8 * 64);
    if (!m.scratch) throw new MonolibError(`${where}: malloc: out of memory`);
    m.inputs = m.describe("input");
    m.outputs = m.describe("output");
    m.buffers = m.inputs.map(() => ({ ptr: 0, size: 0 }));
    return m;
  }

  // a call into the module; a trap becomes a MonolibError naming the function
  call(name, ...args) {
    try {
      return this.x[name](...args);
    } catch (e) {
      if (e instanceof WebAssembly.RuntimeError || e instanceof RangeError) {
        throw new MonolibError(`${name} trapped: ${e.message}`);
      }
      if (e instanceof WasiExit) throw new MonolibError(`${name}: ${e.message}`);
      throw e;
    }
  }

  cstring(p) {
    const bytes = new Uint8Array(this.memory.buffer);
    let end = p;
    while (bytes[end] !== 0) end++;
    return utf8.decode(bytes.subarray(p, end));
  }

  error(fn) {
    const msg = this.cstring(this.call("monolib_last_error"));
    return new MonolibError(msg || `${fn} failed`);
  }

  check(fn, ...args) {
    if (this.call(fn, ...args) !== 0) throw this.error(fn);
  }

  describe(kind) {
    const n = this.call(`monolib_num_${kind}s`, this.handle);
    const out = [];
    for (let i = 0; i < n; i++) {
      this.check(`monolib_${kind}_info`, this.handle, i, this.scratch);
      const dv = new DataView(this.memory.buffer);
      const at = (off) => dv.getUint32(this.scratch + off, true);
      const ndim = dv.getInt32(this.scratch + 12, true);
      const dims = (off) => {
        const p = at(off);
        return Array.from({ length: ndim }, (_, d) => Number(dv.getBigInt64(p + 8 * d, true)));
      };
      const type = this.cstring(at(4));
      out.push({
        name: this.cstring(at(0)), type, dims: dims(16), lo: dims(32), hi: dims(36), step: dims(40),
        nbytes: Number(dv.getBigUint64(this.scratch + 24, true)),
        bytesPerElement: (dv.getUint8(this.scratch + 9) / 8) * dv.getUint16(this.scratch + 10, true),
      });
    }
    return out;
  }

  /**
   * Run the model.
   * @param {object|Array} feeds {name: {data, dims}} (or an array in input order); data a
   *   typed array of the input's type (Float32Array for float32...), dims its shape
   *   (default: the input's static shape)
   * @returns {object} {outputName: {data, dims, type}}: copies, kept across runs
   */
  run(feeds) {
    if (!this.handle) throw new MonolibError(`${this.where}: the model is closed`);
    const given = Array.isArray(feeds) ? feeds : this.inputs.map((inp) => feeds[inp.name]);
    if (!Array.isArray(feeds)) {
      for (const k of Object.keys(feeds)) {
        if (!this.inputs.some((inp) => inp.name === k)) {
          throw new MonolibError(`run: no input named "${k}" (inputs: ${this.inputs.map((i) => i.name).join(", ")})`);
        }
      }
    }
    this.inputs.forEach((inp, i) => {
      const feed = given[i];
      if (feed === undefined || feed === null) return; // unset: zeros or the previous run's (monolib.h)
      const data = ArrayBuffer.isView(feed) ? feed : feed.data;
      const dims = (ArrayBuffer.isView(feed) ? null : feed.dims) || inp.dims;
      const want = typeOf(inp.type);
      if (!(data instanceof want) && !(inp.type === "float16" && data.constructor.name === "Float16Array")) {
        throw new MonolibError(`run: input "${inp.name}" is ${inp.type}: give a ${want.name}, got ${data && data.constructor.name}`);
      }
      if (dims.length > 64) throw new MonolibError(`run: input "${inp.name}" has ${dims.length} dims`);
      const bytes = data.byteLength;
      const elems = dims.reduce((a, b) => a * b, 1);
      if (elems * inp.bytesPerElement !== bytes) {
        throw new MonolibError(`run: input "${inp.name}": ${bytes} bytes of data for shape [${dims.join(", ")}] `
          + `(${elems * inp.bytesPerElement} bytes of ${inp.type})`);
      }
      const buf = this.buffers[i];
      if (buf.size < bytes) {
        if (buf.ptr) this.call("free", buf.ptr);
        buf.ptr = this.call("malloc", Math.max(bytes, 1));
        buf.size = buf.ptr ? bytes : 0;
        if (!buf.ptr) throw new MonolibError(`run: input "${inp.name}": malloc(${bytes}): out of memory`);
      }
      // views made after malloc: a memory.grow detaches the old buffer
      new Uint8Array(this.memory.buffer, buf.ptr, bytes).set(new Uint8Array(data.buffer, data.byteOffset, bytes));
      const shape = this.scratch + TENSOR_INFO_BYTES;
      const dv = new DataView(this.memory.buffer);
      dims.forEach((d, k) => dv.setBigInt64(shape + 8 * k, BigInt(d), true));
      this.check("monolib_set_input_shaped", this.handle, i, buf.ptr, shape, dims.length);
    });
    this.check("monolib_run_model", this.handle);
    const result = {};
    this.outputs.forEach((o, i) => {
      const shape = this.scratch + TENSOR_INFO_BYTES;
      this.check("monolib_output_shape", this.handle, i, shape);
      const p = this.call("monolib_output_data", this.handle, i);
      if (!p) throw this.error("monolib_output_data");
      const dv = new DataView(this.memory.buffer);
      const dims = o.dims.map((_, d) => Number(dv.getBigInt64(shape + 8 * d, true)));
      const bytes = dims.reduce((a, b) => a * b, 1) * o.bytesPerElement;
      const T = typeOf(o.type);
      const copy = new Uint8Array(bytes);
      copy.set(new Uint8Array(this.memory.buffer, p, bytes));
      result[o.name] = { data: new T(copy.buffer, 0, bytes / T.BYTES_PER_ELEMENT), dims, type: o.type };
    });
    return result;
  }

  /** Free the handle and its arena (the model cannot run after). */
  close() {
    if (!this.handle) return;
    for (const b of this.buffers) if (b.ptr) this.call("free", b.ptr);
    this.call("free", this.scratch);
    this.call("monolib_close", this.handle);
    this.handle = 0;
  }
}
