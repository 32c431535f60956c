// specviz stage, timeline: stepping through the steps the browser holds, asking the server for the
// ones it lacks, and following the server's payloads.
//
// A run is a timeline of steps: step 0 the prefill, then PHASES per cycle (specviz/timeline.py, the one
// place that counts them; `PHASES` comes from there, specviz/viz/stage_js.py `parts_js`). Stepping to
// a known step is local; only a step the browser does not have goes to the server, and clicks that
// arrive meanwhile are queued and shown as such, never dropped.

const REPORT_IDLE_MS = 1200;  // a pause this long after local steps tells the server where we are
const PAGE_IDLE_MS = 4000;  // ... and this long, the page around the stage is drawn again (`pauseLater`)
const SV_CLICKS = {next_phase: 'next', next_cycle: 'nextCycle', back: 'back'};  // a queued click -> the api's

function cycleOf(step) { return step === 0 ? -1 : Math.floor((step - 1) / PHASES); }

function nextCycleTarget(step) {
  return step % PHASES === 0 ? step + PHASES : Math.ceil(step / PHASES) * PHASES;
}

function known(st, step) { return !!(st.s.data && st.s.data.steps[String(step)]); }

function atEdge(st, step = st.s.cur) { return !known(st, step + 1) && !!st.s.data.more; }

// Local stepping; what the server is asked when the step is not here.
function go(st, target, kind) {
  const s = st.s;
  note(st, ['go', kind, s.cur, target, s.waiting]);
  if (waits(st, target, kind)) return;
  target = Math.max(0, target);
  if (s.data.quiz && kind !== 'back' && s.data.quiz.includes(s.cur) && s.held !== s.cur && target > s.cur) {
    s.held = s.cur;  // a pending question: the first Next says so, the second skips it
    say(st, 'A quiz question is waiting beside this picture: answer it, or press Next again to skip it.');
  } else if (known(st, target)) {
    stepTo(st, target, kind);
  } else if (kind !== 'back' && !s.data.more) {
    say(st, s.data.end || 'Nothing more to show.');
  } else {
    s.waiting = true;
    s.awaited = target;
    say(st, kind === 'back' ? 'Fetching the earlier step from the server…'
      : `Computing cycle ${cycleOf(target) + 1} on the server…`);
    st.root.classList.add('svs-busy');
    request(st, kind, {target});
  }
}

// A click that must wait, visibly: for the answer to a request that is out, or for the page's new data.
function waits(st, target, kind) {
  const s = st.s;
  if (s.waiting) {
    s.queue.push(kind);
    say(st, `Computing on the server… ${s.queue.length} click${s.queue.length > 1 ? 's' : ''} queued.`);
    return true;
  }
  // The page is being drawn again for a change made elsewhere (a setting in the sidebar: maybe a
  // new run, or new settings that the cycles in hand were not computed under): the click waits for
  // the page's new data and is then carried out on it. Stepped at once, it stepped the old run,
  // and the new run's first payload then undid it (ten Next cycle clicks after a proposer change
  // ended at cycle 9).
  if (!(st.hooks.held && st.hooks.held())) return false;
  s.deferred.push([kind, target]);
  say(st, `Waiting for the page… ${s.deferred.length} click${s.deferred.length > 1 ? 's' : ''} queued.`);
  clearInterval(s.holdTimer);
  s.holdTimer = setInterval(() => release(st), 100);
  return true;
}

// A step the browser holds: drawn at once, and the server told where we are when it matters.
function stepTo(st, target, kind) {
  const s = st.s, before = cycleOf(s.cur);
  render(st, target);
  say(st, s.held === null || s.held === target ? '' : 'Quiz question skipped.');
  if (s.held !== null && s.held !== target) s.held = null;
  pauseLater(st);
  clearTimeout(s.reportTimer);
  if (s.cur === s.reported) return;
  // At the edge of what the browser has (the next click would wait for the server), in a new
  // cycle (the server adopts it and computes one more) or at a phase that the tabs or the quiz
  // below follow: say where we are the moment the step's motion has run, if the browser is
  // still there. Not sooner: on a machine that also computes, the script run and its payload
  // landing mid-motion cost frames. (A click that comes meanwhile and needs the server asks at
  // once: `request`.) Otherwise after a pause, so Play, Reset and the history start from the
  // step on screen.
  const soon = atEdge(st, target) || (cycleOf(target) !== before && target > 0 && kind !== 'back') || s.data.follow;
  // Never while a request is out (see the prefetch in `absorb`): the request tells the server the step.
  const due = () => !s.waiting && s.cur === target && s.cur !== s.reported;
  // A live lecture's room follows the lecturer's every step: told at once (through the route,
  // no script run), so the students' pages move with the lecturer's (ui/live.py).
  if (s.data.live) report(st, 'view');
  else if (soon) whenStill(st, () => { if (due()) report(st, 'view'); });
  else s.reportTimer = setTimeout(() => { if (due()) report(st, 'view'); }, REPORT_IDLE_MS);
}

// The clicks that waited for the page (`hooks.held`), on the data it brought.
function release(st) {
  const s = st.s;
  if (!s.deferred.length || s.waiting || (st.hooks.held && st.hooks.held())) return;
  clearInterval(s.holdTimer);
  const clicks = s.deferred;
  s.deferred = [];
  say(st, '');
  for (const [kind, target] of clicks) {
    if (kind === 'seek') st.api.seek(target);
    else st.api[SV_CLICKS[kind]]();
  }
}

// Once stepping has stopped on a step for a while (someone reads, or reaches for the history),
// the server draws the page around the stage again for it (a report with `pause`; once per step):
// the history slider, which the payloads' fragment runs leave as it was. Not at every short
// pause: a whole-page run costs the browser several times a payload's redraw, and on a busy
// classroom server (bench.load) clicks often come more than a second apart. A payload drawn with
// the whole page (`page`) already did it for its step.
function pauseLater(st) {
  const s = st.s, at = s.cur;
  clearTimeout(s.pauseTimer);
  s.pauseTimer = setTimeout(() => {
    if (s.waiting || s.cur !== at || s.pausedAt === at) return;
    s.pausedAt = at;
    report(st, 'view', {pause: true});
  }, PAGE_IDLE_MS);
}

// `fn` once the picture's motion (FLIP glides, fade-ins, cross-fades) has run. Asked a frame on:
// a cross-fade is a CSS transition, which exists only once the next style update has run.
function whenStill(st, fn) {
  requestAnimationFrame(() => {
    const running = st.root.getAnimations ? st.root.getAnimations({subtree: true}) : [];
    Promise.all(running.map(a => a.finished.catch(() => null))).then(fn);
  });
}

// A payload, unpacked: follow the server where it moved, else keep the step shown up to date.
function absorb(st, data) {
  const s = st.s;
  note(st, ['got', data.seq, data.view, data.answered, s.cur, s.waiting, s.queue.length]);
  // From Pause until the server says it stopped, a step it made on its timer before it heard of the
  // pause (a payload built while playing) is not followed: it was on its way when the lecturer
  // paused, and the pause's own answer would move the page back (4 → 5 → 4).
  if (s.pausing && data.run === s.run) {
    if (data.playing) { note(st, ['played-after-pause', data.seq, data.view]); return; }
    s.pausing = false;
  }
  intro(st, data.intro);
  if (data.page) s.pausedAt = data.view;  // the whole page was drawn for the server's step
  const answered = s.waiting && !!s.pending && data.answered === s.pending;
  // The answer to a request this page stopped waiting for (an earlier payload brought the step):
  // the server now stands where the browser went then; take its sequence number, do not follow it.
  if (!!s.superseded && data.answered === s.superseded && data.run === s.run) {
    s.superseded = null;
    s.seq = data.seq;
  }
  const fresh = s.data === null || data.run !== s.run || data.seq !== s.seq || answered;
  // A payload that brings the step a click waits for, before the request's own answer (the
  // server computed it in advance, e.g. the prefetch a report started): show it now.
  const arrived = !fresh && s.waiting && data.run === s.run && s.awaited !== null && !!data.steps[String(s.awaited)];
  s.data = data;
  if (fresh || arrived) follow(st, data, fresh, arrived);
  else if (known(st, s.cur)) repaint(st, data.steps[String(s.cur)]);
  prefetch(st, data);
}

// The server moved (a new run, its own step, an answered request): follow it. Or the step a click
// waits for came: show it. Then the clicks queued meanwhile, on the new data.
function follow(st, data, fresh, arrived) {
  const s = st.s;
  if (fresh) {
    s.run = data.run;
    s.seq = data.seq;
    s.reported = data.view;
  } else {
    s.superseded = s.pending;
  }
  const hadRequest = s.waiting;
  s.waiting = false;
  s.pending = null;
  clearTimeout(s.resendTimer);
  st.root.classList.remove('svs-busy');
  const first = Object.keys(data.steps)[0];
  const show = arrived ? s.awaited : known(st, data.view) ? data.view : first !== undefined ? Number(first) : null;
  s.awaited = null;
  if (show !== null) {
    render(st, show);
    pauseLater(st);
  }
  say(st, data.notice || '');
  if (!hadRequest && !s.queue.length) return;
  const queued = s.queue;
  s.queue = [];
  for (let i = 0; i < queued.length; i++) {
    st.api[SV_CLICKS[queued[i]]]();
    if (s.waiting) { s.queue.push(...queued.slice(i + 1)); break; }  // the rest wait for this answer
  }
}

// The next cycle, asked for as soon as this one is on screen (once per state of the run).
function prefetch(st, data) {
  const s = st.s, mark = `${data.run}:${Object.keys(data.steps).pop()}`;
  if (!data.prefetch || s.waiting || s.prefetched === mark) return;
  s.prefetched = mark;  // after the motion of the step just shown (the script run costs frames),
  whenStill(st, () => {
    // Not while a request is out: its script run would be cut short by this one, and the asked
    // step would come only after this cycle's compute too. The answer's payload asks again.
    if (s.waiting) s.prefetched = null;
    else send(st, 'prefetch');
  });
}
