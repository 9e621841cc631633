// Offline checks of rendered Kubernetes manifests (`helm template ... | node validate.mjs NAME`):
//
// 1. every document validates against the Kubernetes OpenAPI schema of its apiVersion/kind
//    (npm kubernetes-models; the PodMonitor against @kubernetes-models/prometheus-operator);
//    unknown kinds and unknown fields are errors (the schemas alone allow extra fields, so a
//    typo such as `readinesProbe` is caught by walking the packages' type declarations);
// 2. the hardening every Deployment of this chart must keep: pod and container
//    securityContext (non-root, read-only root, no privilege escalation, ALL capabilities
//    dropped, RuntimeDefault seccomp), terminationGracePeriodSeconds >= preStop sleep +
//    TOOLYARD_DRAIN_SECONDS, HTTP containers probed on /readyz (readiness) and /healthz
//    (liveness; for those serving traffic, startup too, and a preStop sleep), a
//    checksum/config annotation, secrets only through secretKeyRef;
// 3. cross-references: PDB and HPA targets, ConfigMaps mounted, Service selectors.
//
// Exits 1 with every problem listed; prints one summary line otherwise.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const label = process.argv[2] ?? "stdin";
const text = readFileSync(0, "utf8");
const problems = [];
const fail = (where, what) => problems.push(`${label}: ${where}: ${what}`);

const docs = [];
for (const doc of parseAllDocuments(text)) {
  if (doc.errors.length) {
    fail("yaml", doc.errors.map((e) => e.message).join("; "));
    continue;
  }
  const obj = doc.toJS();
  if (obj != null) docs.push(obj);
}
if (docs.length === 0) fail("input", "no manifests rendered");

// --- 1. schemas -------------------------------------------------------------------------
const moduleFor = (apiVersion) => {
  if (apiVersion.startsWith("monitoring.coreos.com/"))
    return `@kubernetes-models/prometheus-operator/${apiVersion}`;
  return `kubernetes-models/${apiVersion}`; // "v1" (core) or "group/version"
};

// Unknown fields. The packages' compiled validators accept any extra property (as the
// Kubernetes OpenAPI schemas do), but the API server drops or refuses them, so a typo such as
// `readinesProbe` would pass silently. Their TypeScript declarations list every field of every
// type, so the object is walked next to those: a key its interface does not declare is an error.
const nodeModules = fileURLToPath(new URL("./node_modules/", import.meta.url));
const interfaces = new Map(); // .d.ts path -> { props: Map(key -> type text), imports: Map(name -> path) }
function resolveImport(from, spec) {
  const base = spec.startsWith(".") ? join(dirname(from), spec) : join(nodeModules, spec);
  return base.replace(/\.js$/, "") + ".d.ts";
}
// The first `export interface` of a declaration file: each property with its type's text
// (a multi-line type keeps its inner lines).
function parseDts(file) {
  if (interfaces.has(file)) return interfaces.get(file);
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    interfaces.set(file, null);
    return null;
  }
  const imports = new Map();
  for (const m of text.matchAll(/^import \{ ([^}]+) \} from "([^"]+)";$/gm))
    for (const name of m[1].split(",").map((n) => n.trim())) imports.set(name, resolveImport(file, m[2]));
  const lines = text.split("\n").filter((l) => !/^\s*(\/\*\*|\*)/.test(l));
  const start = lines.findIndex((l) => /^export interface \w+/.test(l));
  if (start < 0) {
    interfaces.set(file, null); // a type alias (IntOrString, Quantity, ...): not an object
    return null;
  }
  const parsed = { props: parseBlock(lines, start + 1).props, imports };
  interfaces.set(file, parsed);
  return parsed;
}
// Properties of a `{ ... }` block starting at line i, up to its closing brace.
function parseBlock(lines, i) {
  const props = new Map();
  let index = null;
  while (i < lines.length) {
    const line = lines[i].trim();
    if (line.startsWith("}")) return { props, index, end: i };
    const m = line.match(/^(?:"([^"]+)"|(\w+))\??: (.*?);?$/);
    const idx = line.match(/^\[key: string\]: (.*?);?$/);
    if (idx) {
      index = idx[1];
      i++;
    } else if (m && m[3] === "{") {
      const inner = parseBlock(lines, i + 1);
      props.set(m[1] ?? m[2], { block: inner });
      i = inner.end + 1;
    } else if (m && m[3].endsWith("{")) {
      // e.g. `Array<{` : skip to the matching close, judged loosely
      let depth = 1;
      i++;
      while (i < lines.length && depth > 0) {
        depth += (lines[i].match(/\{/g) ?? []).length - (lines[i].match(/\}/g) ?? []).length;
        i++;
      }
      props.set(m[1] ?? m[2], { type: "unknown" });
    } else {
      if (m) props.set(m[1] ?? m[2], { type: m[3] });
      i++;
    }
  }
  return { props, index, end: i };
}
function checkType(value, type, ctx, path, out) {
  if (value === null || typeof value !== "object") return;
  if (type.block) return checkProps(value, type.block, ctx, path, out);
  const t = type.type.trim();
  const arr = t.match(/^Array<(.+)>$/);
  if (arr) {
    if (Array.isArray(value)) value.forEach((v, n) => checkType(v, { type: arr[1] }, ctx, `${path}[${n}]`, out));
    return;
  }
  const ref = t.match(/^(I\w+)$/);
  if (ref && ctx.imports.has(ref[1]) && !Array.isArray(value)) {
    const file = ctx.imports.get(ref[1]);
    const target = parseDts(file);
    if (target) checkProps(value, { props: target.props, index: null }, target, path, out);
  }
}
function checkProps(value, block, ctx, path, out) {
  if (block.index !== null && block.props.size === 0) {
    for (const [k, v] of Object.entries(value)) checkType(v, { type: block.index }, ctx, `${path}.${k}`, out);
    return;
  }
  for (const [k, v] of Object.entries(value)) {
    const type = block.props.get(k);
    if (type === undefined) {
      if (block.index === null) out.push(`${path}.${k}`.replace(/^\./, ""));
      continue;
    }
    checkType(v, type, ctx, `${path}.${k}`, out);
  }
}
function declarationOf(apiVersion, kind) {
  return join(nodeModules, moduleFor(apiVersion), `${kind}.d.ts`);
}

const byKind = new Map();
for (const obj of docs) {
  const where = `${obj.kind ?? "?"}/${obj.metadata?.name ?? "?"}`;
  if (!obj.apiVersion || !obj.kind) {
    fail(where, "apiVersion and kind are required");
    continue;
  }
  (byKind.get(obj.kind) ?? byKind.set(obj.kind, []).get(obj.kind)).push(obj);
  const spec = moduleFor(obj.apiVersion);
  let Model;
  try {
    Model = (await import(spec))[obj.kind];
  } catch (e) {
    fail(where, `no schema for apiVersion ${obj.apiVersion} (${e.code ?? e.message})`);
    continue;
  }
  if (typeof Model !== "function") {
    fail(where, `unknown kind ${obj.kind} in ${obj.apiVersion}`);
    continue;
  }
  try {
    new Model(obj).validate();
  } catch (e) {
    fail(where, `schema: ${e.message}`);
  }
  const decl = parseDts(declarationOf(obj.apiVersion, obj.kind));
  if (!decl) {
    fail(where, `no type declaration for ${obj.apiVersion} ${obj.kind}: cannot check for unknown fields`);
  } else {
    const extra = [];
    checkProps(obj, { props: decl.props, index: null }, decl, "", extra);
    for (const p of extra) fail(where, `unknown field ${p}`);
  }
}

// --- 2. hardening -------------------------------------------------------------------------
const secretish = /(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY)/i;
const deployments = byKind.get("Deployment") ?? [];
if (deployments.length === 0) fail("chart", "no Deployment rendered");
for (const d of deployments) {
  const where = `Deployment/${d.metadata?.name}`;
  const tpl = d.spec?.template ?? {};
  const pod = tpl.spec ?? {};
  const psc = pod.securityContext ?? {};
  if (psc.runAsNonRoot !== true) fail(where, "pod securityContext.runAsNonRoot must be true");
  if (psc.runAsUser === 0) fail(where, "pod securityContext.runAsUser must not be 0");
  if (psc.seccompProfile?.type !== "RuntimeDefault") fail(where, "pod seccompProfile.type must be RuntimeDefault");
  if (pod.automountServiceAccountToken !== false) fail(where, "automountServiceAccountToken must be false");
  if (!tpl.metadata?.annotations?.["checksum/config"]) fail(where, "pod template needs a checksum/config annotation");
  const grace = pod.terminationGracePeriodSeconds;
  if (!Number.isInteger(grace)) fail(where, "terminationGracePeriodSeconds must be set");
  const containers = pod.containers ?? [];
  if (containers.length === 0) fail(where, "no containers");
  for (const c of [...containers, ...(pod.initContainers ?? [])]) {
    const cw = `${where} container ${c.name}`;
    const sc = c.securityContext ?? {};
    if (sc.readOnlyRootFilesystem !== true) fail(cw, "securityContext.readOnlyRootFilesystem must be true");
    if (sc.allowPrivilegeEscalation !== false) fail(cw, "securityContext.allowPrivilegeEscalation must be false");
    if (sc.privileged === true) fail(cw, "securityContext.privileged must not be true");
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) fail(cw, "securityContext.capabilities.drop must include ALL");
    if ((sc.capabilities?.add ?? []).length) fail(cw, "securityContext.capabilities.add must be empty");
    if (sc.runAsNonRoot === false || sc.runAsUser === 0) fail(cw, "container must not run as root");
    if (!/[:@]/.test(c.image ?? "") || /:latest$/.test(c.image)) fail(cw, `image must carry a tag or digest, not latest: ${c.image}`);
    if (!c.resources?.requests) fail(cw, "resources.requests must be set");
    const env = c.env ?? [];
    for (const e of env) {
      if (secretish.test(e.name) && e.value !== undefined) fail(cw, `${e.name} is a secret and must come from a secretKeyRef, not a literal value`);
    }
    const drain = Number(env.find((e) => e.name === "TOOLYARD_DRAIN_SECONDS")?.value ?? 10);
    const preStop = c.lifecycle?.preStop?.sleep?.seconds ?? 0;
    if (Number.isInteger(grace) && grace < drain + preStop)
      fail(cw, `terminationGracePeriodSeconds ${grace} < preStop sleep ${preStop} + TOOLYARD_DRAIN_SECONDS ${drain}`);
    const args = c.args ?? [];
    if ((c.ports ?? []).length || args[0] === "serve") {
      const path = (p) => p?.httpGet?.path;
      if (path(c.readinessProbe) !== "/readyz") fail(cw, "readinessProbe must be an httpGet on /readyz");
      if (path(c.livenessProbe) !== "/healthz") fail(cw, "livenessProbe must be an httpGet on /healthz");
      // A worker's port serves only its probes (`--health`), no traffic through a Service:
      // it needs no startup grace before liveness (the port answers at once, before the
      // bus) and no preStop pause.
      const servesTraffic = args[0] !== "worker";
      if (servesTraffic && path(c.startupProbe) !== "/healthz") fail(cw, "startupProbe must be an httpGet on /healthz");
      if (servesTraffic && !(preStop > 0)) fail(cw, "an HTTP server needs a preStop sleep so its endpoint leaves load balancers first");
    } else if (args[0] !== "worker") {
      fail(cw, `neither a gateway (serve with a port) nor a worker: args ${JSON.stringify(args)}`);
    }
  }
}

// --- 3. cross-references ------------------------------------------------------------------------
const matches = (selector, labels) => Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
const podLabels = deployments.map((d) => d.spec?.template?.metadata?.labels ?? {});
for (const d of deployments) {
  if (!matches(d.spec?.selector?.matchLabels, d.spec?.template?.metadata?.labels))
    fail(`Deployment/${d.metadata.name}`, "selector does not match its pod template's labels");
  for (const v of d.spec?.template?.spec?.volumes ?? []) {
    if (v.configMap && !(byKind.get("ConfigMap") ?? []).some((c) => c.metadata.name === v.configMap.name))
      fail(`Deployment/${d.metadata.name}`, `mounts ConfigMap ${v.configMap.name}, which is not rendered`);
    for (const item of v.configMap?.items ?? []) {
      const cm = (byKind.get("ConfigMap") ?? []).find((c) => c.metadata.name === v.configMap.name);
      if (cm && !(item.key in (cm.data ?? {}))) fail(`Deployment/${d.metadata.name}`, `ConfigMap ${cm.metadata.name} has no key ${item.key}`);
    }
  }
}
for (const kind of ["PodDisruptionBudget", "Service", "PodMonitor"]) {
  for (const o of byKind.get(kind) ?? []) {
    const sel = kind === "Service" ? o.spec?.selector : o.spec?.selector?.matchLabels;
    if (!podLabels.some((l) => matches(sel, l))) fail(`${kind}/${o.metadata.name}`, "selects no rendered pod");
  }
}
for (const h of byKind.get("HorizontalPodAutoscaler") ?? []) {
  const target = deployments.find((d) => d.metadata.name === h.spec?.scaleTargetRef?.name);
  if (!target) fail(`HorizontalPodAutoscaler/${h.metadata.name}`, "scaleTargetRef names no rendered Deployment");
  else if (target.spec?.replicas !== undefined) fail(`Deployment/${target.metadata.name}`, "sets replicas while an HPA scales it");
}

if (problems.length) {
  for (const p of problems) console.error(p);
  process.exit(1);
}
const kinds = [...byKind].map(([k, v]) => `${v.length} ${k}`).join(", ");
console.log(`${label}: ${docs.length} manifests valid (${kinds})`);
