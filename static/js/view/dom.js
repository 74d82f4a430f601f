// Element builders. Text always goes in through textContent, so token text or output
// containing markup is shown, never run.

const SVG = "http://www.w3.org/2000/svg";

export function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) if (value != null) node.setAttribute(key, value);
  if (text != null) node.textContent = text;
  return node;
}

export function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) if (value != null) node.setAttribute(key, String(value));
  if (text != null) node.textContent = text;
  return node;
}
