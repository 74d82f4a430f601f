// Setup and view state: policy form controls from schemas, and the URL a lecturer shares. No DOM.

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

const URL_FIELDS = ["prompt", "policy", "seed", "temperature", "max_new_tokens"];

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
  for (const key of ["seed", "temperature", "max_new_tokens"]) {
    if (setup[key] != null && !Number.isNaN(Number(setup[key]))) setup[key] = Number(setup[key]);
  }
  for (const [key, value] of query) {
    if (!key.startsWith("p.")) continue;
    setup.params[key.slice(2)] = value === "true" ? true : value === "false" ? false : Number.isNaN(Number(value)) ? value : Number(value);
  }
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
