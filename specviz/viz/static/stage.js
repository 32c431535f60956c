// specviz stage: a run's phases stepped in the browser (specviz/viz/stage_js.py builds the module).
//
// The server sends the steps it knows (the shown cycle's phases, the cycle before's last one and,
// once computed, the next cycles') as data: per step its title and its parts (the KV picture, the
// status line, the narrative, the token strip: specviz/viz/stage_data.py `PARTS`, here `SV_PARTS`).
// Stepping to a known step is local and the picture is patched, not replaced. The code is split by
// job, one file each, concatenated in this order by stage_js.py:
//
//   stage_motion.js     patching a picture in place, FLIP glides, fade-ins, cross-fades
//   stage_paint.js      the stage's frame, a step's parts painted into it, the guided start, the notes
//   stage_transport.js  messages to the server, requests sent again until answered, step bodies held
//   stage_timeline.js   local stepping, asking for what is not here, following the server's payloads
//   stage_keys.js       the arrow keys
//   stage.js            `createStage`: the state and the api the pages call
//
// `createStage(root, hooks)` is the shared core: the Streamlit component (stage_app.js), the
// standalone run page (standalone.js) and a live lecture's follower page (follower.js) all call it,
// so they cannot drift. Hooks: `send(message)` carries a message to the server (none: nothing is
// sent), `held()` says the page is being drawn again (clicks wait for its data), `shown(step, d)`
// follows each step drawn.

function stageState() {
  return {
    data: null, cur: null, run: null, seq: null, queue: [], waiting: false, held: null,
    reportTimer: null, reported: null, pausing: false, pauseTimer: null, pausedAt: null, painted: 0,
    prefetched: null, shown: null, req: 0, pending: null, awaited: null, superseded: null, resendTimer: null,
    log: [], deferred: [], holdTimer: null,
    // Held step bodies by signature; the last payload; where round trips' time went; what came.
    bodies: new Map(), raw: null, timings: [], received: {payloads: 0, steps: 0, bodies: 0, again: 0},
  };
}

function createStage(root, hooks) {
  const st = {root, hooks, el: stageFrame(root), s: stageState(), api: null};
  introButton(st.el);
  st.refit = () => fitTree(root);  // a projector's screen replacing a laptop's
  window.addEventListener('resize', st.refit);
  st.api = stageApi(st);
  return st.api;
}

function stageApi(st) {
  const s = st.s;
  return {
    next() { if (s.data) go(st, s.cur + 1, 'next_phase'); },
    nextCycle() { if (s.data) go(st, nextCycleTarget(s.cur), 'next_cycle'); },
    back() { if (s.data && s.cur > 0) go(st, s.cur - 1, 'back'); },
    seek(step) { if (s.data) go(st, step, 'seek'); },
    // Play (on) or Pause: the server plays, from the step shown here (a report with what to do).
    // From Pause until the server says it stopped, its steps are not followed (`absorb`).
    play(on) {
      if (!s.data || s.cur === null) return;
      s.pausing = !on;
      report(st, 'play', {on: !!on});
    },
    get state() { return s; },
    // A payload is unpacked (inflated) and taken at once, in the call that brings it: nothing
    // waits for a later task, and payloads are taken in the order they come.
    update(data) {
      const arrived = performance.timeOrigin + performance.now();
      // Built before one already taken (the page's script run and the route can cross): stale.
      if (s.data && data.channel === s.data.channel && data.version < s.data.version) {
        note(st, ['stale', data.version, s.data.version]);
        return;
      }
      try {
        const got = unpack(st, data);
        const unpacked = performance.timeOrigin + performance.now();
        absorb(st, got);
        timed(st, got, arrived, unpacked);
      } catch (err) {
        say(st, `The stage could not read the server's data: ${err}`);
      }
    },
    destroy() {
      clearTimeout(s.reportTimer); clearTimeout(s.pauseTimer); clearTimeout(s.resendTimer); clearInterval(s.holdTimer);
      window.removeEventListener('resize', st.refit);
    },
  };
}
