// Element builders. Text always goes in through textContent, so token text or output
// containing markup is shown, never run. A `style` goes in through the CSSOM (node.style), which the
// server's Content-Security-Policy allows, where a style attribute would be refused.

const SVG = "http://www.w3.org/2000/svg";

function setAll(node, attrs) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value == null) continue;
    if (key === "style") node.style.cssText = String(value);
    else node.setAttribute(key, String(value));
  }
}

export function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  setAll(node, attrs);
  if (text != null) node.textContent = text;
  return node;
}

export function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  setAll(node, attrs);
  if (text != null) node.textContent = text;
  return node;
}
