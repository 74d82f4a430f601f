// Policy pickers and their parameter controls, built from the server's JSON schemas.

import { coerceParam, paramControls } from "../model/setup.js";
import { el } from "./dom.js";

/** Fills a <select> with the policies, `selected` first chosen; each option's tooltip is its one line. */
export function fillPolicySelect(select, schemas, selected) {
  select.replaceChildren(...Object.entries(schemas).map(([name, schema]) => (
    el("option", { value: name, title: schema.description ?? null }, name))));
  if (selected && selected in schemas) select.value = selected;
  select.title = schemas[select.value]?.description ?? "";
}

/** What the chosen policy does, in one line, under its picker. */
export function describePolicy(box, schema) {
  box.textContent = schema?.description ?? "";
  box.hidden = !schema?.description;
}

/**
 * The request's fields on the form (`data-field` inputs) take the served bounds and defaults
 * (model/setup.js setupRules): nothing of the request's rules is written in the page's HTML.
 */
export function applyRequestRules(root, { limits, defaults }) {
  const prompt = root.querySelector('[data-field="prompt"]');
  if (prompt && Number.isFinite(limits.prompt.maxLength)) prompt.maxLength = limits.prompt.maxLength;
  for (const [name, limit] of Object.entries(limits)) {
    const input = root.querySelector(`input[data-field="${name}"]`);
    if (!input) continue;
    if (Number.isFinite(limit.min)) input.min = String(limit.min);
    if (Number.isFinite(limit.max)) input.max = String(limit.max);
    if (defaults[name] != null) input.value = String(defaults[name]);
  }
}

/** Labelled inputs for one policy's parameters, starting at the defaults (or `values`). */
export function renderParams(fieldset, schema, values = {}) {
  const legend = fieldset.querySelector("legend");
  fieldset.replaceChildren(legend);
  const controls = paramControls(schema);
  if (!controls.length) fieldset.append(el("p", { class: "hint" }, "no parameters"));
  for (const control of controls) fieldset.append(paramInput(control, values[control.name]));
  fieldset.__controls = controls;
}

function paramInput(control, value) {
  const label = el("label", { class: "param", title: control.description });
  const input = el("input", {
    name: control.name, "data-param": control.name,
    type: control.kind === "boolean" ? "checkbox" : "number",
    min: control.min, max: control.max, step: control.kind === "boolean" ? null : control.step,
  });
  const initial = value ?? control.value;
  if (control.kind === "boolean") input.checked = Boolean(initial);
  else input.value = initial ?? "";
  label.append(el("span", { class: "param-name" }, control.label), input,
               el("small", { class: "param-help" }, `${control.description} · default ${control.value}`));
  return label;
}

/** The parameters a fieldset holds, typed by its schema; defaults left out so URLs stay short. */
export function readParams(fieldset) {
  const params = {};
  for (const control of fieldset.__controls ?? []) {
    const input = fieldset.querySelector(`[data-param="${control.name}"]`);
    const value = coerceParam(control, control.kind === "boolean" ? input.checked : input.value);
    if (value !== control.value) params[control.name] = value;
  }
  return params;
}

/** Marks the control an error event names (`params.mu`, `temperature`, …). */
export function markInvalid(root, field) {
  for (const node of root.querySelectorAll(".invalid")) node.classList.remove("invalid");
  if (!field) return;
  const name = field.startsWith("params.") ? field.slice(7) : null;
  const target = name ? root.querySelector(`[data-param="${CSS.escape(name)}"]`) : root.querySelector(`[data-field="${CSS.escape(field)}"]`);
  target?.classList.add("invalid");
}
