// node node_driver.mjs spec.json report.json: tests/wasm/host_run.mjs in Node.
import { readFile, writeFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";
import { runSpec } from "./host_run.mjs";

const spec = JSON.parse(await readFile(process.argv[2], "utf-8"));
if (spec.noGlobalCrypto) delete globalThis.crypto; // as in Node 18 (no WebCrypto global)
spec.mjs = pathToFileURL(spec.mjs).href;
const report = await runSpec(spec, async (p) => new Uint8Array(await readFile(p)));
await writeFile(process.argv[3], JSON.stringify(report));
