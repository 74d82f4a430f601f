// The WebSocket client: one run at a time, resolved by run_finished, rejected by an error event.

export class RunFailed extends Error {
  constructor(event) {
    super(event.message);
    this.field = event.field ?? null;
    this.event = event;
  }
}

export class Connection {
  constructor(url, onQueued) {
    this.url = url;
    this.onQueued = onQueued;
    this.socket = null;
    this.active = null; // { onEvent, resolve, reject }
  }

  async open() {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) return;
    await new Promise((resolve, reject) => {
      const socket = new WebSocket(this.url);
      socket.addEventListener("open", () => resolve(), { once: true });
      socket.addEventListener("error", () => reject(new Error("cannot reach the server")), { once: true });
      socket.addEventListener("message", (message) => this._receive(JSON.parse(message.data)));
      socket.addEventListener("close", () => this._lost());
      this.socket = socket;
    });
  }

  /** Sends a run request; `onEvent` sees every event of the run, in order. */
  async run(request, onEvent) {
    return this.start({ type: "run", ...request }, onEvent);
  }

  /** Sends a message that starts a run (`run`, `what_if`: docs/websocket.md); resolved by its run_finished. */
  async start(message, onEvent) {
    if (this.active) throw new Error("a run is already in progress");
    await this.open();
    return new Promise((resolve, reject) => {
      this.active = { onEvent, resolve, reject };
      this.socket.send(JSON.stringify(message));
    });
  }

  cancel() {
    if (this.active && this.socket?.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify({ type: "cancel" }));
  }

  _receive(message) {
    const active = this.active;
    if (message.type === "queued") {
      this.onQueued(message.position);
      return;
    }
    if (!active) return;
    active.onEvent(message);
    if (message.type === "run_finished" || message.type === "error") {
      this.active = null;
      if (message.type === "run_finished") active.resolve(message);
      else active.reject(new RunFailed(message));
    }
  }

  _lost() {
    this.socket = null;
    if (this.active) {
      this.active.reject(new Error("connection to the server lost"));
      this.active = null;
    }
  }
}
