// Checks docs/openapi.yaml: that it is a valid OpenAPI 3.1 document, that its schemas and
// examples are sound, and that it has not drifted from the API contract, docs/api.md (the
// source: the OpenAPI document follows it).
//
//   node tests/openapi/check.mjs [path/to/openapi.yaml]
//
// Steps, each adding its problems to one list:
//   1. YAML parse (duplicate keys and other YAML errors count as problems).
//   2. The OpenAPI 3.1 JSON schema and internal $ref resolution (@seriousme/openapi-schema-validator).
//   3. Every schema compiled with Ajv in strict mode (catches misspelt keywords and bad types,
//      which the OpenAPI schema lets through), and every example validated against its schema.
//   4. Contract: the error codes of docs/api.md's status table equal the ErrorCode enum, every
//      status of that table has a response, the operations docs/api.md names (`GET /healthz`,
//      in backquotes) are the document's operations, no more and no fewer, every response
//      declares X-Request-Id, and every operation has an example. docs/api.md's sections and
//      table rows marked "not yet served" describe what this version does not serve: their
//      operations and codes are left out.
// Prints one summary line; exits 1 when anything is wrong.

import { readFileSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Validator } from "@seriousme/openapi-schema-validator";
import Ajv2020 from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { parseDocument } from "yaml";

const addFormats = addFormatsModule.default || addFormatsModule;

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "..", "..");
const specPath = resolve(process.argv[2] || resolve(repoRoot, "docs", "openapi.yaml"));
const apiMdPath = resolve(repoRoot, "docs", "api.md");
const NOT_SERVED = /not yet served/i;
const fromCwd = relative(process.cwd(), specPath);
const shownSpec = fromCwd && !fromCwd.startsWith("..") ? fromCwd : specPath;

// The query parameters the contract gives each operation.
const REQUIRED_QUERY = {
  "get /v1/resources/{resource}": ["index", "wait_ms"],
  "get /v1/resources": ["prefix", "limit", "cursor"],
};

const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
const problems = [];
const problem = (msg) => problems.push(msg);
const stats = { operations: 0, schemas: 0, examples: 0 };

function finish() {
  if (problems.length === 0) {
    return;
  }
  for (const p of problems) {
    console.error(`  - ${p}`);
  }
  console.log(`check-openapi: ${shownSpec} FAILED: ${problems.length} problem(s)`);
  process.exit(1);
}

// A document shaped too oddly for a later step still ends in a summary line and exit 1.
process.on("uncaughtException", (e) => {
  problem(`check stopped: ${e.message}`);
  finish();
});

// ---- 1. YAML ---------------------------------------------------------------------------

let doc;
try {
  const parsed = parseDocument(readFileSync(specPath, "utf8"), { uniqueKeys: true, prettyErrors: true });
  const yamlErrors = [...parsed.errors, ...parsed.warnings];
  // After the first few, YAML errors are mostly the same mistake seen again.
  for (const e of yamlErrors.slice(0, 5)) {
    problem(`YAML: ${e.message.split("\n")[0]}`);
  }
  if (yamlErrors.length > 5) {
    problem(`YAML: ... and ${yamlErrors.length - 5} more`);
  }
  if (parsed.errors.length === 0) {
    doc = parsed.toJS({ maxAliasCount: 100 });
  }
} catch (e) {
  problem(`cannot read or parse: ${e.message}`);
}
if (problems.length === 0 && (!doc || typeof doc !== "object" || Array.isArray(doc))) {
  problem("the document is not a YAML mapping");
}
finish();
if (doc.openapi !== "3.1.0") {
  problem(`openapi is ${JSON.stringify(doc.openapi)}, expected "3.1.0"`);
}

// ---- 2. OpenAPI schema -----------------------------------------------------------------

const validator = new Validator();
const result = await validator.validate(structuredClone(doc));
if (!result.valid) {
  const errs = Array.isArray(result.errors) ? result.errors : [result.errors];
  // The OpenAPI schema reports every branch of every failed oneOf; the first few are enough.
  for (const e of errs.slice(0, 15)) {
    problem(
      typeof e === "string"
        ? `OpenAPI: ${e}`
        : `OpenAPI: ${e.instancePath || "/"} ${e.message}${e.params ? " " + JSON.stringify(e.params) : ""}`,
    );
  }
  if (errs.length > 15) {
    problem(`OpenAPI: ... and ${errs.length - 15} more`);
  }
}

// ---- helpers ---------------------------------------------------------------------------

function pointer(path) {
  let node = doc;
  for (const raw of path.split("/").slice(1)) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (node === null || typeof node !== "object" || !(key in node)) {
      return undefined;
    }
    node = node[key];
  }
  return node;
}

// Follows $ref chains of OpenAPI objects (not schemas).
function deref(obj, where) {
  const seen = new Set();
  while (obj && typeof obj === "object" && typeof obj.$ref === "string") {
    if (!obj.$ref.startsWith("#/") || seen.has(obj.$ref)) {
      problem(`${where}: cannot resolve ${obj.$ref}`);
      return undefined;
    }
    seen.add(obj.$ref);
    const target = pointer(obj.$ref.slice(1));
    if (target === undefined) {
      problem(`${where}: ${obj.$ref} does not exist`);
      return undefined;
    }
    obj = target;
  }
  return obj;
}

// ---- 3. Schemas and examples -----------------------------------------------------------

const ROOT_ID = "urn:mutexd:openapi";
const ajv = new Ajv2020({ strict: true, allErrors: true, strictRequired: false });
addFormats(ajv);
// OpenAPI's own schema keywords, and its integer formats.
ajv.addVocabulary(["example", "discriminator", "xml", "externalDocs"]);
const intFormat = (lo, hi) => ({ type: "number", validate: (n) => Number.isInteger(n) && n >= lo && n <= hi });
ajv.addFormat("int32", intFormat(-(2 ** 31), 2 ** 31 - 1));
ajv.addFormat("int64", intFormat(-(2 ** 63), 2 ** 63));
ajv.addFormat("uint64", intFormat(0, 2 ** 64));
ajv.addFormat("float", { type: "number", validate: () => true });
ajv.addFormat("double", { type: "number", validate: () => true });

// Rewrites "#/components/schemas/X" into a reference to the schema bundle registered below.
function rewriteRefs(node) {
  if (Array.isArray(node)) {
    return node.map(rewriteRefs);
  }
  if (node === null || typeof node !== "object") {
    return node;
  }
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === "$ref" && typeof v === "string" && v.startsWith("#/components/schemas/")) {
      out[k] = `${ROOT_ID}#/$defs/${v.slice("#/components/schemas/".length)}`;
    } else if (k === "examples" || k === "example" || k === "const" || k === "enum" || k === "default") {
      out[k] = v;
    } else {
      out[k] = rewriteRefs(v);
    }
  }
  return out;
}

const componentSchemas = doc.components?.schemas || {};
let schemasOk = true;
try {
  ajv.addSchema({ $id: ROOT_ID, $defs: rewriteRefs(componentSchemas) });
} catch (e) {
  schemasOk = false;
  problem(`components.schemas: ${e.message}`);
}

function ajvErrors(validate) {
  return (validate.errors || []).map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ");
}

const compiled = new Map();
function compile(schema, where) {
  if (!schemasOk) {
    return undefined;
  }
  const key = JSON.stringify(schema);
  if (compiled.has(key)) {
    return compiled.get(key);
  }
  let fn;
  try {
    fn = ajv.compile(rewriteRefs(schema));
    stats.schemas++;
  } catch (e) {
    problem(`${where}: schema does not compile: ${e.message}`);
  }
  compiled.set(key, fn);
  return fn;
}

function checkExample(schema, value, where) {
  const fn = compile(schema, where);
  stats.examples++;
  if (fn && !fn(value)) {
    problem(`${where}: example does not match its schema: ${ajvErrors(fn)}`);
  }
}

// Component schemas, one by one, with their own `examples`.
for (const [name, schema] of Object.entries(componentSchemas)) {
  const where = `components.schemas.${name}`;
  const ref = { $ref: `#/components/schemas/${name}` };
  compile(ref, where);
  for (const [i, ex] of (schema?.examples || []).entries()) {
    checkExample(ref, ex, `${where}.examples[${i}]`);
  }
}

// Examples of a media type, parameter or header object.
function checkExamples(holder, schema, where) {
  if (!holder || !schema) {
    return 0;
  }
  let n = 0;
  if ("example" in holder) {
    checkExample(schema, holder.example, `${where}.example`);
    n++;
  }
  for (const [name, ex] of Object.entries(holder.examples || {})) {
    const e = deref(ex, `${where}.examples.${name}`);
    if (e && "value" in e) {
      checkExample(schema, e.value, `${where}.examples.${name}`);
      n++;
    }
  }
  return n;
}

function checkContent(content, where) {
  let n = 0;
  for (const [type, media] of Object.entries(content || {})) {
    n += checkExamples(media, media.schema, `${where}.content[${type}]`);
  }
  return n;
}

function checkParameter(p, where) {
  const param = deref(p, where);
  if (param) {
    compile(param.schema || {}, where);
    checkExamples(param, param.schema, where);
  }
  return param;
}

const responsesSeen = []; // [where, resolved response]
const statusesSeen = new Set();

const responseExamples = new Map(); // resolved response -> its number of examples

function checkResponse(r, where) {
  const resp = deref(r, where);
  if (!resp) {
    return { resp: undefined, examples: 0 };
  }
  if (responseExamples.has(resp)) {
    return { resp, examples: responseExamples.get(resp) };
  }
  responsesSeen.push([where, resp]);
  for (const [name, h] of Object.entries(resp.headers || {})) {
    const header = deref(h, `${where}.headers.${name}`);
    if (header?.schema) {
      compile(header.schema, `${where}.headers.${name}`);
      checkExamples(header, header.schema, `${where}.headers.${name}`);
    }
  }
  const examples = checkContent(resp.content, where);
  responseExamples.set(resp, examples);
  return { resp, examples };
}

for (const [path, item] of Object.entries(doc.paths || {})) {
  for (const p of item.parameters || []) {
    checkParameter(p, `paths[${path}].parameters`);
  }
  for (const method of METHODS) {
    const op = item[method];
    if (!op) {
      continue;
    }
    stats.operations++;
    const where = `${method.toUpperCase()} ${path}`;
    for (const p of op.parameters || []) {
      checkParameter(p, `${where} parameters`);
    }
    const body = deref(op.requestBody, `${where} requestBody`);
    if (body) {
      checkContent(body.content, `${where} requestBody`);
    }
    let successExamples = 0;
    for (const [status, r] of Object.entries(op.responses || {})) {
      statusesSeen.add(String(status));
      const { examples: n } = checkResponse(r, `${where} ${status}`);
      if (/^2/.test(status)) {
        successExamples += n;
      }
    }
    if (successExamples === 0) {
      problem(`${where}: no example for its success response`);
    }
  }
}
for (const [name, r] of Object.entries(doc.components?.responses || {})) {
  checkResponse(r, `components.responses.${name}`);
}

// ---- 4. Contract -----------------------------------------------------------------------

// docs/api.md, cut into its "## " sections; those marked "not yet served" are left out.
function servedSections() {
  let md;
  try {
    md = readFileSync(apiMdPath, "utf8");
  } catch (e) {
    problem(`cannot read docs/api.md: ${e.message}`);
    return [];
  }
  const sections = [];
  let title = "";
  let lines = [];
  const flush = () => sections.push({ title, text: lines.join("\n") });
  let fence = false;
  for (const line of md.split("\n")) {
    if (line.startsWith("```")) {
      fence = !fence;
    }
    if (!fence && /^##\s/.test(line)) {
      flush();
      title = line.replace(/^##\s+/, "");
      lines = [];
    } else {
      lines.push(line);
    }
  }
  flush();
  return sections.filter((s) => !NOT_SERVED.test(s.text.split("\n").filter((l) => l.startsWith(">")).join(" ")));
}
const sections = servedSections();

// The status table: lines "| 400 | `a`, `b` | when |" under "## Status codes"; a row marked
// "not yet served" is left out.
function contractCodes() {
  const source = "docs/api.md";
  const section = sections.find((s) => /^Status codes/.test(s.title));
  if (!section) {
    problem(`${source}: no '## Status codes' section`);
    return { source, table: {} };
  }
  const table = {};
  for (const line of section.text.split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    if (cells.length < 4 || !/^\d{3}$/.test(cells[1]) || NOT_SERVED.test(line)) {
      continue;
    }
    const codes = [...cells[2].matchAll(/`([a-z][a-z0-9_]*)`/g)].map((m) => m[1]);
    table[cells[1]] = [...(table[cells[1]] || []), ...codes];
  }
  if (Object.keys(table).length === 0) {
    problem(`${source}: the status table has no rows`);
  }
  return { source, table };
}

// The operations the served sections name: `GET /path` or `POST /path...`, in backquotes.
function contractOperations() {
  const ops = new Map();
  for (const { text } of sections) {
    for (const m of text.matchAll(/`(GET|POST|PUT|PATCH|DELETE|HEAD) (\/[^`?\s]*)/g)) {
      ops.set(`${m[1].toLowerCase()} ${m[2]}`, [m[1].toLowerCase(), m[2]]);
    }
  }
  return [...ops.values()];
}
const REQUIRED_OPERATIONS = contractOperations();
if (REQUIRED_OPERATIONS.length === 0) {
  problem("docs/api.md names no operation");
}

const { source, table } = contractCodes();
const contract = new Set(Object.values(table).flat());
const enumCodes = doc.components?.schemas?.ErrorCode?.enum;
if (!Array.isArray(enumCodes)) {
  problem("components.schemas.ErrorCode.enum is missing");
} else {
  const specCodes = new Set(enumCodes);
  for (const code of contract) {
    if (!specCodes.has(code)) {
      problem(`error code ${code} (in ${source}) is not in components.schemas.ErrorCode.enum`);
    }
  }
  for (const code of specCodes) {
    if (!contract.has(code)) {
      problem(`error code ${code} is in components.schemas.ErrorCode.enum but not in ${source}`);
    }
  }
}

// Every status of the table has a response: in an operation, or among the reusable responses
// (404 and 405 come from the router, not from one operation).
const componentStatuses = new Set();
for (const [name, r] of Object.entries(doc.components?.responses || {})) {
  const resp = deref(r, `components.responses.${name}`);
  for (const media of Object.values(resp?.content || {})) {
    const s = JSON.stringify(media.schema || {});
    for (const code of contract) {
      if (s.includes(`"${code}"`) || JSON.stringify(media.example || media.examples || {}).includes(`"${code}"`)) {
        for (const [status, codes] of Object.entries(table)) {
          if (codes.includes(code)) {
            componentStatuses.add(status);
          }
        }
      }
    }
  }
}
for (const [status, codes] of Object.entries(table)) {
  if (!statusesSeen.has(status) && !componentStatuses.has(status)) {
    problem(`status ${status} (${codes.join(", ")}) has no response in the document`);
  }
}

// No more operations than the contract names.
for (const [path, item] of Object.entries(doc.paths || {})) {
  for (const method of METHODS) {
    if (item[method] && !REQUIRED_OPERATIONS.some(([m, p]) => m === method && p === path)) {
      problem(`operation ${method.toUpperCase()} ${path} is not in ${source}`);
    }
  }
}

for (const [method, path] of REQUIRED_OPERATIONS) {
  const op = doc.paths?.[path]?.[method];
  if (!op) {
    problem(`operation ${method.toUpperCase()} ${path} (in ${source}) is not in the document`);
    continue;
  }
  const params = [...(doc.paths[path].parameters || []), ...(op.parameters || [])]
    .map((p) => deref(p, `${method.toUpperCase()} ${path}`))
    .filter(Boolean);
  for (const q of REQUIRED_QUERY[`${method} ${path}`] || []) {
    if (!params.some((p) => p.in === "query" && p.name === q)) {
      problem(`${method.toUpperCase()} ${path}: missing query parameter ${q}`);
    }
  }
  if (path.includes("{resource}") && !params.some((p) => p.in === "path" && p.name === "resource")) {
    problem(`${method.toUpperCase()} ${path}: missing path parameter resource`);
  }
}

// Headers the contract promises.
for (const [where, resp] of responsesSeen) {
  if (!resp.headers || !("X-Request-Id" in resp.headers)) {
    problem(`${where}: response does not declare the X-Request-Id header`);
  }
}
const headerOf = (name, header) => deref(doc.components?.responses?.[name], name)?.headers?.[header];
for (const [name, header] of [["LeaseHeld", "Retry-After"], ["Unavailable", "Retry-After"], ["MethodNotAllowed", "Allow"]]) {
  if (!headerOf(name, header)) {
    problem(`components.responses.${name}: missing the ${header} header`);
  }
}

// Request bodies reject unknown fields.
for (const name of ["AcquireRequest", "RenewRequest", "ReleaseRequest", "BreakRequest"]) {
  if (componentSchemas[name]?.additionalProperties !== false) {
    problem(`components.schemas.${name}: additionalProperties must be false`);
  }
}

finish();
console.log(
  `check-openapi: ${shownSpec} is valid OpenAPI ${doc.openapi}: ${stats.operations} operations, ` +
    `${stats.schemas} schemas compiled, ${stats.examples} examples valid; ` +
    `${contract.size} error codes and ${REQUIRED_OPERATIONS.length} operations match ${source}`,
);
