// Setup and view state: policy form controls from schemas, and the URL a lecturer shares. No DOM.
//
// A link is `?<query>#setup=<packed>`. The query holds the setup (prompt, policy, p.<param>, seed,
// temperature, max_new_tokens), the view (lecture's keys) and compare mode (`compare`, `align`).
// A long prompt would make the query longer than a server accepts (9 000 CJK characters are 81 000
// characters percent-encoded), so past MAX_QUERY characters the setup moves into the fragment,
// which browsers never send: JSON, deflated where the browser can, in base64url. Values read from
// a URL are checked against the policies' schemas and the request's (`checkSetup`, with the rules
// `setupRules` reads from /api/request and /api/info), and every one replaced by its default is
// named, never dropped silently. Parameters in a link are text (`p.mu=0.05`, `talon:mu=0.05`, the
// grammar of engine/policies/spec.py) read as their schema's types.

/** The settings that must match for two runs' speeds and outputs to be compared. */
export function baselineKey(request) {
  const { prompt, seed, temperature, top_k = 0, top_p = 1, max_new_tokens } = request;
  return JSON.stringify([prompt, seed, temperature, top_k, top_p, max_new_tokens]);
}

/** Labelled controls for a policy's parameters, from its JSON schema. */
export function paramControls(schema) {
  return Object.entries(schema?.properties ?? {}).map(([name, prop]) => ({
    name,
    label: prop.title ?? name,
    kind: prop.type === "boolean" ? "boolean" : prop.type === "integer" ? "integer" : "number",
    value: prop.default,
    min: prop.minimum ?? prop.exclusiveMinimum ?? null,
    max: prop.maximum ?? prop.exclusiveMaximum ?? null,
    step: prop.type === "integer" ? 1 : "any",
    description: prop.description ?? "",
  }));
}

/** Reads a form control's string back to the schema's type; "" means the default. */
export function coerceParam(control, raw) {
  if (control.kind === "boolean") return Boolean(raw);
  if (raw === "" || raw == null) return control.value;
  const value = Number(raw);
  return Number.isNaN(value) ? raw : value;
}

/**
 * A text value (from a link) as its schema property's type: "true"/"false" for a boolean, a number
 * for a number or an integer; text that is neither stays text, for the check to name.
 *
 * readTextValue({ type: "number" }, "0.05") -> 0.05; readTextValue({ type: "boolean" }, "false") -> false
 */
export function readTextValue(prop, text) {
  if (typeof text !== "string") return text;
  if (prop?.type === "boolean") return text === "true" ? true : text === "false" ? false : text;
  if (prop?.type === "number" || prop?.type === "integer") {
    return text.trim() !== "" && !Number.isNaN(Number(text)) ? Number(text) : text;
  }
  return text;
}

const URL_FIELDS = ["prompt", "policy", "seed", "temperature", "max_new_tokens"];
const NUMBER_FIELDS = ["temperature", "seed", "max_new_tokens"];

/**
 * The form's bounds and defaults: the server's request schema (/api/request, GenerationRequest) and
 * its default policy (/api/info). A link holds integers exactly only up to 2^53 − 1, so no bound
 * goes past it.
 *
 * Returns { limits: { prompt: { maxLength }, <field>: { min, max, exclusiveMin, aboveZero, integer } },
 *           defaults: { policy, <field>: default } }
 */
export function setupRules(requestSchema, defaultPolicy) {
  const props = requestSchema?.properties ?? {};
  const limits = { prompt: { maxLength: props.prompt?.maxLength ?? Infinity } };
  const defaults = { policy: defaultPolicy };
  for (const name of NUMBER_FIELDS) {
    const prop = props[name] ?? {};
    limits[name] = { min: prop.minimum ?? prop.exclusiveMinimum ?? -Infinity, exclusiveMin: prop.minimum == null && prop.exclusiveMinimum != null,
                     max: Math.min(prop.maximum ?? Infinity, Number.MAX_SAFE_INTEGER),
                     aboveZero: prop.minimumAboveZero ?? null, integer: prop.type === "integer" };
    defaults[name] = prop.default;
  }
  return { limits, defaults };
}

/** A setup as a query string a lecturer can share: params go in as `p.<name>`. */
export function encodeSetup(setup) {
  const query = new URLSearchParams();
  for (const key of URL_FIELDS) if (setup[key] != null && setup[key] !== "") query.set(key, String(setup[key]));
  for (const [name, value] of Object.entries(setup.params ?? {})) query.set(`p.${name}`, String(value));
  if (setup.trace) query.set("trace", setup.trace);
  return query.toString();
}

export function decodeSetup(search) {
  const query = new URLSearchParams(search);
  const setup = { params: {} };
  for (const key of URL_FIELDS) if (query.has(key)) setup[key] = query.get(key);
  for (const key of NUMBER_FIELDS) {
    if (setup[key] != null && !Number.isNaN(Number(setup[key]))) setup[key] = Number(setup[key]);
  }
  // Parameters stay text until checkSetup reads them by their schema.
  for (const [key, value] of query) if (key.startsWith("p.")) setup.params[key.slice(2)] = value;
  if (query.has("trace")) setup.trace = query.get("trace");
  return setup;
}

// ---------------------------------------------------------------- lecture view state (lecture's keys)

/**
 * Where a class stopped: trace, run (index within a multi-run trace, 0-based), step (1-based), phase
 * ("draft-3", "verify", "accept-2", "commit"), view (the theory panel shown) and presentation mode.
 * Values are strings as in the URL; model/phases.js parsePosition checks step and phase.
 */
export const VIEW_KEYS = ["trace", "run", "step", "phase", "view", "present"];

export function encodeView(view, query = new URLSearchParams()) {
  for (const key of VIEW_KEYS) {
    const value = view[key];
    if (value == null || value === "" || value === false) query.delete(key);
    else query.set(key, value === true ? "1" : String(value));
  }
  return query;
}

export function decodeView(search) {
  const query = new URLSearchParams(search);
  const view = {};
  for (const key of VIEW_KEYS) if (query.has(key)) view[key] = query.get(key);
  view.present = query.get("present") === "1";
  return view;
}

// ---------------------------------------------------------------- checking what a URL asked for

/**
 * A setup from a URL made safe for the form: unknown policies and parameters, and values out of
 * bounds, are replaced by defaults. `rules` are `setupRules`'s. Returns { setup, problems } with one
 * sentence per replacement.
 */
export function checkSetup(setup, schemas, { limits, defaults }) {
  const problems = [];
  const out = { ...setup, params: {} };
  if (setup.policy != null && !(setup.policy in schemas)) {
    problems.push(`unknown policy "${setup.policy}" (using ${defaults.policy}; known: ${Object.keys(schemas).join(", ")})`);
    out.policy = defaults.policy;
  }
  for (const key of NUMBER_FIELDS) {
    if (setup[key] == null) continue;
    const problem = boundsProblem(setup[key], limits[key]);
    if (problem) {
      problems.push(`${key} ${problem} (using ${defaults[key]})`);
      out[key] = defaults[key];
    }
  }
  if (typeof setup.prompt === "string" && setup.prompt.length > limits.prompt.maxLength) {
    problems.push(`the prompt is ${setup.prompt.length} characters; the form takes ${limits.prompt.maxLength} (cut there)`);
    out.prompt = setup.prompt.slice(0, limits.prompt.maxLength);
  }
  const policy = out.policy ?? defaults.policy;
  const checked = checkParams(policy, setup.params ?? {}, schemas);
  out.params = checked.params;
  problems.push(...checked.problems);
  return { setup: out, problems };
}

/**
 * A policy's parameters checked against its schema (text values read as its types first);
 * unknown or out-of-range ones dropped for the default.
 */
export function checkParams(policy, params, schemas) {
  const controls = new Map(paramControls(schemas[policy]).map((c) => [c.name, c]));
  const out = {};
  const problems = [];
  for (const [name, text] of Object.entries(params)) {
    const control = controls.get(name);
    if (!control) {
      problems.push(`${policy} has no parameter "${name}" (ignored)`);
      continue;
    }
    const value = readTextValue(schemas[policy].properties[name], text);
    const problem = paramProblem(control, value, schemas[policy].properties[name]);
    if (problem) problems.push(`${policy} ${name} ${problem} (using the default ${control.value})`);
    else out[name] = value;
  }
  return { params: out, problems };
}

function boundsProblem(value, { min, max, exclusiveMin = false, aboveZero = null, integer }) {
  if (typeof value !== "number" || !Number.isFinite(value)) return `"${value}" is not a number`;
  if (integer && !Number.isInteger(value)) return `${value} is not a whole number`;
  if (value < min || (exclusiveMin && value === min) || value > max) return `${value} is outside ${min}–${max}`;
  if (aboveZero != null && value > 0 && value < aboveZero) return `${value} is neither 0 nor at least ${aboveZero}`;
  return null;
}

function paramProblem(control, value, prop) {
  if (control.kind === "boolean") return typeof value === "boolean" ? null : `"${value}" is not true or false`;
  if (typeof value !== "number" || !Number.isFinite(value)) return `"${value}" is not a number`;
  if (control.kind === "integer" && !Number.isInteger(value)) return `${value} is not a whole number`;
  const low = prop.minimum ?? prop.exclusiveMinimum;
  const high = prop.maximum ?? prop.exclusiveMaximum;
  const tooLow = prop.minimum != null ? value < prop.minimum : prop.exclusiveMinimum != null && value <= prop.exclusiveMinimum;
  const tooHigh = prop.maximum != null ? value > prop.maximum : prop.exclusiveMaximum != null && value >= prop.exclusiveMaximum;
  if (tooLow || tooHigh) return `${value} is outside ${low ?? "−∞"}–${high ?? "∞"}`;
  return null;
}

// ---------------------------------------------------------------- compare mode in the URL

/**
 * Compare mode: `compare` lists the panes as the bench writes policies (`talon:mu=0.05,eagle`);
 * `compare=1` means the default panes (or, with a trace, its recorded runs); `align=tokens` aligns
 * panes by tokens emitted instead of by step.
 */
export function encodeCompare(compare, query = new URLSearchParams()) {
  query.delete("compare");
  query.delete("align");
  if (!compare) return query;
  const panes = (compare.panes ?? []).map(encodePane).join(",");
  query.set("compare", panes || "1");
  if (compare.align === "tokens") query.set("align", "tokens");
  return query;
}

export function decodeCompare(search) {
  const query = new URLSearchParams(search);
  if (!query.has("compare")) return null;
  const value = query.get("compare");
  const panes = value === "1" || value === "" ? [] : value.split(",").filter(Boolean).map(decodePane);
  return { panes, align: query.get("align") === "tokens" ? "tokens" : "step" };
}

/** {policy, params: {mu: 0.05}} <-> "<policy>:mu=0.05", the grammar of engine/policies/spec.py PolicySpec. */
export function encodePane(pane) {
  return [pane.policy, ...Object.entries(pane.params ?? {}).map(([k, v]) => `${k}=${v}`)].join(":");
}

/** A pane's text: the policy and its parameters, values still text (checkSetup reads them by the schema). */
export function decodePane(text) {
  const [policy, ...pairs] = text.split(":");
  const params = {};
  for (const pair of pairs) {
    const parsed = parsePair(pair);
    if (parsed) params[parsed[0]] = parsed[1];
  }
  return { policy: policy.trim(), params };
}

/** "key=value" -> [key, value], both trimmed; null without "=" or a key (engine/policies/spec.py parse_pair). */
function parsePair(pair) {
  const at = pair.indexOf("=");
  const key = at < 0 ? "" : pair.slice(0, at).trim();
  return key ? [key, pair.slice(at + 1).trim()] : null;
}

// ---------------------------------------------------------------- links of any length

export const MAX_QUERY = 1500;

/**
 * The link for a setup, a view and compare mode: "?query" while it is short, else the setup packed
 * into "#setup=…" and only the view and compare keys in the query.
 */
export async function encodeLink({ setup = null, view = {}, compare = null } = {}, maxQuery = MAX_QUERY) {
  const rest = encodeCompare(compare, encodeView(view));
  const full = new URLSearchParams(setup ? encodeSetup(setup) : "");
  for (const [key, value] of rest) full.set(key, value);
  const text = full.toString();
  if (text.length <= maxQuery) return text ? `?${text}` : "";
  const short = rest.toString();
  return `${short ? `?${short}` : ""}#setup=${await pack(setup)}`;
}

/** The setup of a link: the fragment's packed setup where there is one, else the query's. */
export async function decodeLink(search, hash) {
  const packed = new URLSearchParams(String(hash ?? "").replace(/^#/, "")).get("setup");
  const setup = packed ? await unpack(packed) : decodeSetup(search);
  return { setup: { params: {}, ...setup }, view: decodeView(search), compare: decodeCompare(search) };
}

/** JSON -> "z." + base64url(deflate-raw(UTF-8)) where the platform deflates, else "b." + base64url(UTF-8). */
export async function pack(value) {
  const bytes = new TextEncoder().encode(JSON.stringify(value));
  if (typeof CompressionStream === "undefined") return `b.${toBase64Url(bytes)}`;
  const deflated = await streamBytes(bytes, new CompressionStream("deflate-raw"));
  return `z.${toBase64Url(deflated)}`;
}

export async function unpack(text) {
  const [kind, body] = [text.slice(0, 2), text.slice(2)];
  let bytes = fromBase64Url(body);
  if (kind === "z.") bytes = await streamBytes(bytes, new DecompressionStream("deflate-raw"));
  else if (kind !== "b.") throw new Error("this link's setup is in an unknown format");
  return JSON.parse(new TextDecoder().decode(bytes));
}

async function streamBytes(bytes, transform) {
  const stream = new Blob([bytes]).stream().pipeThrough(transform);
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function toBase64Url(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function fromBase64Url(text) {
  const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
  return Uint8Array.from(binary, (ch) => ch.charCodeAt(0));
}
