// Validates Kubernetes objects (YAML, several documents a file, or `-` for standard input)
// against the Kubernetes schemas of the npm package kubernetes-models, strictly:
//
//   node tests/deploy/check.mjs FILE...         every object must pass
//   node tests/deploy/check.mjs --self-test FILE
//                                               the check itself: the objects of FILE pass,
//                                               and each mistake below, made in a copy of
//                                               them, must fail
//
// The schemas (Kubernetes' OpenAPI definitions, compiled by kubernetes-models into
// validate functions) check types, required fields and enums, but allow any field they do
// not name, so a misspelled field (`readinesProbe`) would pass. Strictness is added by
// watching the validate function itself: each object is handed to it behind a Proxy that
// records which fields it reads. A typed object's validator reads each field its schema
// names and no other; a map's (labels, a ConfigMap's data) goes through every key. So a
// field of a typed object the validator never read is one the schema does not have:
// reported as unknown, with its path.
//
// Then the deployment's own rules, on the mutexd StatefulSet (the kit's promises in
// docs/kubernetes.md): probes on /healthz and /readyz with a startupProbe, a high liveness
// failureThreshold, the connection string and tokens from a Secret, no root, a read-only
// root filesystem.
//
// Prints one line per object and a summary; exits 1 when anything is wrong.

import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

function load(file) {
    const text = readFileSync(file === "-" ? 0 : file, "utf8");
    const out = [];
    for (const doc of parseAllDocuments(text, { uniqueKeys: true })) {
        if (doc.errors.length) throw new Error(`${file}: ${doc.errors.map(String).join("; ")}`);
        const value = doc.toJS();
        if (value !== null && value !== undefined) out.push(value);
    }
    return out;
}

// "apps/v1" + "StatefulSet" -> IoK8sApiAppsV1StatefulSet; "v1" (core) -> IoK8sApiCoreV1...
function schemaName(apiVersion, kind) {
    const parts = String(apiVersion).split("/");
    const version = parts.pop();
    const group = parts.length ? parts[0].split(".")[0] : "core";
    const cap = (s) => s.charAt(0).toUpperCase() + s.slice(1);
    return `IoK8sApi${cap(group)}${cap(version)}${kind}`;
}

// Wraps value so that the fields the validator reads are recorded; returns the proxy and a
// function listing the fields of typed objects it never read.
function watched(value) {
    const read = new Map(); // target -> Set of keys read
    const iterated = new Set(); // targets whose keys were enumerated (maps)
    const proxies = new Map();
    const wrap = (v) => {
        if (v === null || typeof v !== "object") return v;
        if (proxies.has(v)) return proxies.get(v);
        read.set(v, new Set());
        const p = new Proxy(v, {
            get(t, k) {
                read.get(t).add(k);
                return wrap(Reflect.get(t, k));
            },
            has(t, k) {
                read.get(t).add(k);
                return Reflect.has(t, k);
            },
            ownKeys(t) {
                iterated.add(t);
                return Reflect.ownKeys(t);
            },
        });
        proxies.set(v, p);
        return p;
    };
    const unknown = () => {
        const out = [];
        const walk = (v, path) => {
            if (v === null || typeof v !== "object") return;
            const seen = read.get(v);
            for (const [k, child] of Object.entries(v)) {
                const here = Array.isArray(v) ? `${path}[${k}]` : `${path}.${k}`;
                if (!Array.isArray(v) && seen && !iterated.has(v) && !seen.has(k)) out.push(here);
                else walk(child, here);
            }
        };
        walk(value, "");
        return out;
    };
    return [wrap(value), unknown];
}

async function validateObject(obj) {
    const problems = [];
    if (!obj || typeof obj !== "object" || !obj.apiVersion || !obj.kind) {
        return ["not a Kubernetes object (no apiVersion or kind)"];
    }
    let validate;
    try {
        ({ validate } = await import(`kubernetes-models/_schemas/${schemaName(obj.apiVersion, obj.kind)}`));
    } catch {
        return [`no schema for ${obj.apiVersion} ${obj.kind}`];
    }
    // kustomize's secretGenerator wraps base64 at 70 columns; the API server decodes with
    // Go's encoding/base64, which skips newlines, but the schema's "byte" format does not.
    if (obj.kind === "Secret" && obj.data && typeof obj.data === "object") {
        obj = { ...obj, data: Object.fromEntries(Object.entries(obj.data).map(
            ([k, v]) => [k, typeof v === "string" ? v.replace(/[\r\n]/g, "") : v])) };
    }
    const [proxy, unknown] = watched(obj);
    if (!validate(proxy)) {
        for (const e of validate.errors || []) {
            problems.push(`${e.instancePath || "/"}: ${e.keyword} ${JSON.stringify(e.params)}`);
        }
    }
    for (const path of unknown()) problems.push(`unknown field ${path}`);
    return problems;
}

// The kit's own promises, on a rendered mutexd StatefulSet.
function rules(obj) {
    if (obj.kind !== "StatefulSet") return [];
    const p = [];
    const spec = obj.spec || {};
    const pod = spec.template?.spec || {};
    const c = (pod.containers || [])[0] || {};
    const probe = (name, path) => {
        const pr = c[name];
        if (!pr) p.push(`no ${name}`);
        else if (pr.httpGet?.path !== path) p.push(`${name} is not on ${path}`);
        return pr || {};
    };
    probe("startupProbe", "/healthz");
    if ((probe("livenessProbe", "/healthz").failureThreshold || 3) < 6) {
        p.push("livenessProbe.failureThreshold is under 6");
    }
    probe("readinessProbe", "/readyz");
    if (spec.replicas !== 3) p.push(`replicas is ${spec.replicas}, not 3`);
    if (!spec.serviceName) p.push("no serviceName (the headless Service)");
    const env = Object.fromEntries((c.env || []).map((e) => [e.name, e]));
    if (!env.MUTEXD_BLOB_CONNECTION_STRING?.valueFrom?.secretKeyRef) {
        p.push("MUTEXD_BLOB_CONNECTION_STRING is not from a Secret");
    }
    if (!/\$\(POD_NAME\)\./.test(env.MUTEXD_ADVERTISE_URL?.value || "")) {
        p.push("MUTEXD_ADVERTISE_URL is not the pod's own name");
    }
    const tokens = (pod.volumes || []).find((v) => v.name === "tokens");
    if (!tokens?.secret) p.push("the tokens file is not from a Secret");
    if (pod.securityContext?.runAsNonRoot !== true) p.push("runAsNonRoot is not true");
    if (c.securityContext?.readOnlyRootFilesystem !== true) p.push("the root filesystem is not read-only");
    if (c.securityContext?.allowPrivilegeEscalation !== false) p.push("allowPrivilegeEscalation is not false");
    const data = (pod.volumes || []).find((v) => v.name === "data");
    const claimed = (spec.volumeClaimTemplates || []).some((t) => t.metadata?.name === "data");
    if (!data?.emptyDir && !claimed) p.push("the data volume is neither an emptyDir nor a claim");
    return p;
}

async function check(objects, label) {
    let bad = 0;
    for (const obj of objects) {
        const name = `${obj?.kind} ${obj?.metadata?.name}`;
        const problems = [...(await validateObject(obj)), ...rules(obj)];
        if (problems.length) {
            bad++;
            console.log(`${label}: ${name}: FAILED`);
            for (const q of problems) console.log(`    ${q}`);
        } else {
            console.log(`${label}: ${name}: valid`);
        }
    }
    return bad;
}

// Mistakes in a copy of the StatefulSet that the check must catch.
const mistakes = [
    ["a misspelled field of the container (readinesProbe)", (s) => {
        const c = s.spec.template.spec.containers[0];
        c.readinesProbe = c.readinessProbe;
        delete c.readinessProbe;
    }],
    ["a misspelled field deep down (httpGet.paht)", (s) => {
        const g = s.spec.template.spec.containers[0].livenessProbe.httpGet;
        g.paht = g.path;
        delete g.path;
    }],
    ["a misspelled field of the spec (replica)", (s) => { s.spec.replica = s.spec.replicas; }],
    ["a field of the wrong type (replicas: \"three\")", (s) => { s.spec.replicas = "three"; }],
    ["a wrong enum value (podManagementPolicy: Sequential)", (s) => {
        s.spec.podManagementPolicy = "Sequential";
    }],
    ["a missing required field (the container's name)", (s) => {
        delete s.spec.template.spec.containers[0].name;
    }],
    ["a liveness probe that gives up quickly", (s) => {
        s.spec.template.spec.containers[0].livenessProbe.failureThreshold = 3;
    }],
    ["a connection string written in the manifest", (s) => {
        const e = s.spec.template.spec.containers[0].env.find(
            (x) => x.name === "MUTEXD_BLOB_CONNECTION_STRING");
        delete e.valueFrom;
        e.value = "UseDevelopmentStorage=true";
    }],
    ["a writable root filesystem", (s) => {
        s.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem = false;
    }],
];

async function selfTest(objects) {
    if ((await check(objects, "as written")) !== 0) return 1;
    const sts = objects.find((o) => o.kind === "StatefulSet");
    if (!sts) {
        console.log("self-test: no StatefulSet to make mistakes in");
        return 1;
    }
    let missed = 0;
    for (const [what, change] of mistakes) {
        const copy = structuredClone(sts);
        change(copy);
        const problems = [...(await validateObject(copy)), ...rules(copy)];
        if (problems.length) {
            console.log(`self-test: ${what}: caught (${problems[0]})`);
        } else {
            console.log(`self-test: ${what}: NOT CAUGHT`);
            missed++;
        }
    }
    console.log(`self-test: ${mistakes.length - missed} of ${mistakes.length} mistakes caught`);
    return missed ? 1 : 0;
}

const args = process.argv.slice(2);
if (args[0] === "--self-test") {
    if (args.length !== 2) {
        console.error("usage: check.mjs --self-test FILE");
        process.exit(2);
    }
    process.exit(await selfTest(load(args[1])));
}
if (!args.length) {
    console.error("usage: check.mjs FILE... | --self-test FILE");
    process.exit(2);
}
let bad = 0, n = 0;
for (const f of args) {
    const objects = load(f);
    n += objects.length;
    bad += await check(objects, f);
}
console.log(`${n - bad} of ${n} objects valid`);
process.exit(bad ? 1 : 0);
