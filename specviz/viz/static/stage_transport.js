// specviz stage, transport: what goes to the server and what comes back.
//
// The glue carries each message (`hooks.send`: the app's stage route or the component's trigger; the
// follower page and the standalone page send nothing). A request (a step the browser lacks) carries an
// id the server echoes in the payload that answers it, and is sent again until answered. A step's heavy
// parts travel once: the app's payload carries the bodies the browser does not hold, deflated
// (`bodies`, specviz/viz/stage_data.py `pack`), and every message back says which it holds (`have`).
// The standalone page's data has every step whole.

const RESEND_MS = 4000;  // a request not answered by then is sent again (then after 8 s, 16 s, ...)
const MOUNT = Math.random().toString(36).slice(2, 10);  // this page's requests, told from another's
const HOLD = 48;  // step bodies kept (a few cycles); the ones the current data names are never dropped

// base64 of zlib-deflated JSON -> the object. Synchronous (fflate, see stage_js.py): the browser's
// DecompressionStream yields between its steps, and on a busy page every hop waited its turn.
function inflate(b64) {
  const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  return JSON.parse(new TextDecoder().decode(svFflate.unzlibSync(bytes)));
}

// The last messages both ways, stamped (ms since the page opened), for the tests (and anyone
// debugging the stage in a console).
function note(st, entry) {
  const log = st.s.log;
  log.push([Math.round(performance.now()), ...entry]);
  if (log.length > 80) log.shift();
}

function send(st, kind, extra) {
  const s = st.s;
  note(st, ['sent', kind, s.cur, extra && extra.target, extra && extra.req]);
  if (!st.hooks.send) return;
  // `sent` orders the messages on the server: the route's calls can overtake each other there. The
  // page's own monotonic clock, not the wall clock, which may step back (stage_protocol.in_order).
  st.hooks.send(Object.assign({kind, step: s.cur, run: s.run, seq: s.seq, have: [...s.bodies.keys()].map(Number),
                               sent: performance.now()}, extra || {}));
}

function report(st, kind, extra) {
  if (!st.hooks.send) return;
  clearTimeout(st.s.reportTimer);
  st.s.reported = st.s.cur;
  send(st, kind, extra);
}

// A trigger value can be lost on its way (two sent in one moment travel as one), and a lost request
// would leave the stage waiting for ever: it is sent again, with the same id, until answered. The
// server's steps are idempotent (move to the browser's step, then step), so a request that did
// arrive twice changes nothing.
function request(st, kind, extra) {
  const s = st.s;
  s.req += 1;
  const id = `${MOUNT}:${s.req}`, message = Object.assign({req: id}, extra);
  report(st, kind, message);
  let wait = RESEND_MS;
  const again = () => {
    if (!s.waiting || s.pending !== id) return;
    send(st, kind, message);
    wait = Math.min(2 * wait, 30000);
    s.resendTimer = setTimeout(again, wait);
  };
  s.pending = id;
  clearTimeout(s.resendTimer);
  s.resendTimer = setTimeout(again, wait);
}

// A packed payload's steps made whole from the bodies it brings and the ones held. A step whose
// body is in neither (a remounted stage starts empty) is left out: the browser lacks it and asks
// for it like any step it lacks, and the answer brings it (the shown step's body always comes).
function unpack(st, data) {
  if (data.bodies === undefined) return data;  // whole steps (the standalone page)
  // Deflated in a component's data; a plain object in the route's answer (gzipped over HTTP).
  const bodies = typeof data.bodies === 'string' ? (data.bodies ? inflate(data.bodies) : {}) : data.bodies;
  const s = st.s, held = s.bodies;  // step bodies by signature, least recently used first (a Map keeps order)
  s.raw = data;
  const got = s.received;  // totals over the payloads so far
  s.received = {payloads: got.payloads + 1, steps: got.steps + Object.keys(data.steps).length,
                bodies: got.bodies + Object.keys(bodies).length,
                again: got.again + Object.keys(bodies).filter(sig => held.has(sig)).length};
  for (const [sig, body] of Object.entries(bodies)) held.set(sig, body);
  const steps = {};
  for (const [k, head] of Object.entries(data.steps)) {
    const sig = String(head.sig), body = held.get(sig);
    if (!body) continue;
    held.delete(sig); held.set(sig, body);  // recently used
    steps[k] = Object.assign({}, head, body);
  }
  const named = new Set(Object.values(data.steps).map(h => String(h.sig)));
  for (const sig of held.keys()) {
    if (held.size <= HOLD) break;
    if (!named.has(sig)) held.delete(sig);
  }
  return Object.assign({}, data, {steps});
}

// Where a round trip's time went (the latency bench reads it): the server's stamps (`served`:
// its callback, the payload's building), then the payload's arrival here and its render.
function timed(st, data, arrived, unpacked) {
  if (!data.served) return;
  const timings = st.s.timings;
  timings.push(Object.assign({arrived, unpacked, done: performance.timeOrigin + performance.now()}, data.served));
  if (timings.length > 40) timings.shift();
}
