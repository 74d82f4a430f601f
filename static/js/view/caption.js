// The narration under the tree: a title naming the step and phase, and the sentence that explains it.

/** Writes a caption ({ title, text } from model/narration.js); marks it new so it can fade in. */
export function renderCaption(box, { title, text }) {
  const titleBox = box.querySelector(".caption-title");
  const textBox = box.querySelector(".caption-text");
  if (textBox.textContent === text && titleBox.textContent === title) return;
  titleBox.textContent = title;
  textBox.textContent = text;
  box.classList.remove("fresh");
  void box.offsetWidth; // restart the fade-in
  box.classList.add("fresh");
}
