// Presentation mode: the form and controls hide, the tree, caption and theory panel fill the screen
// and text scales for a projector. P (or the button) toggles it; Escape leaves it, also when the
// browser's full screen is left with Escape (the browser keeps that key to itself).

export class Presentation {
  constructor({ body = document.body, button, onChange = () => {} }) {
    Object.assign(this, { body, button, onChange });
    this.active = false;
    document.addEventListener("fullscreenchange", () => {
      if (!document.fullscreenElement && this.active && this._wentFull) this.leave();
    });
  }

  toggle() {
    if (this.active) this.leave();
    else this.enter();
  }

  enter({ fullscreen = true } = {}) {
    if (this.active) return;
    this.active = true;
    this._wentFull = false;
    this._apply();
    // Full screen needs a user gesture; from a shared link the page simply fills the window.
    if (fullscreen && document.documentElement.requestFullscreen && !document.fullscreenElement) {
      document.documentElement.requestFullscreen().then(() => { this._wentFull = true; }).catch(() => {});
    }
  }

  leave() {
    if (!this.active) return;
    this.active = false;
    if (document.fullscreenElement) document.exitFullscreen().catch(() => {});
    this._apply();
  }

  _apply() {
    this.body.classList.toggle("presenting", this.active);
    this.button?.setAttribute("aria-pressed", String(this.active));
    this.onChange(this.active);
  }
}
