// A live lecture's follower page (viz/follower.py): the stage core fed by the room's long poll.
//
// The page joins once (its student key kept in this tab's session storage, so a reload rejoins as
// the same student and the address holds only the public room code), then asks the room "anything
// after version v?" in a loop (ui/live_route.py `here`). Following, each answer moves the stage to
// the lecturer's step; branched (Back / Next / the arrow keys), the stage stays where the student
// went and the header says how far behind the lecturer it is; Follow (F) snaps back. A poll's
// question, options and (after the reveal) the class's counts are drawn with textContent only.
// The tabs under the stage open the app's other views of the step on screen (viz/follower_views.py):
// an open tab asks the room for its view of each step shown (`do: view`), the figures drawn by the
// plotly.js the route serves, loaded the first time a tab of charts opens.

const svBody = document.body;
const svCode = svBody.dataset.room, svPath = svBody.dataset.path;
const svKeyName = `specviz.live.${svCode}`;
const svEl = {
  where: document.getElementById('where'), follow: document.getElementById('follow'),
  poll: document.getElementById('poll'), next: document.getElementById('next'), back: document.getElementById('back'),
  views: document.getElementById('views'), tabs: [...document.querySelectorAll('.svf-tabs [role=tab]')],
  fork: document.getElementById('fork'),
};
const svViews = {tab: '', pos: null, asked: null, key: null, want: 0, plotly: null};
window.__specvizViews = svViews;
const svLive = {student: null, following: true, since: -1, room: null, seq: 0, stopped: false};
document.documentElement.classList.add('js');

const svStage = createStage(document.getElementById('stage'), {shown: () => { svWhere(); svViewRefresh(); }});
window.__specvizStage = svStage;
window.__specvizLive = svLive;

async function svPost(body) {
  const r = await fetch(svPath, {method: 'POST', headers: {'Content-Type': 'application/json'},
                                 body: JSON.stringify(body), cache: 'no-store'});
  const answer = await r.json().catch(() => ({error: `the server answered ${r.status}`}));
  return {status: r.status, answer};
}

async function svJoin() {
  try { svLive.student = sessionStorage.getItem(svKeyName); } catch (e) { svLive.student = null; }
  if (svLive.student) return;
  const {status, answer} = await svPost({do: 'join'});
  if (status !== 200) throw Object.assign(new Error(answer.error), {status});
  svLive.student = answer.student;
  try { sessionStorage.setItem(svKeyName, svLive.student); } catch (e) { /* private mode: this page only */ }
}

function svWhere() {
  const room = svLive.room, cur = svStage.state.cur;
  if (!room) return;
  let text;
  if (room.waiting) text = 'Waiting for the lecturer to start…';
  else if (room.lecturer_away) text = 'Waiting for the lecturer (their page is away)…';
  else if (svLive.following || cur === room.step) text = 'Following the lecturer';
  else if (cur < room.step) text = `${room.step - cur} step${room.step - cur > 1 ? 's' : ''} behind the lecturer`;
  else text = 'Ahead of the lecturer';
  if (svStage.state.shown) text += ` · ${svStage.state.shown.title}`;
  svEl.where.textContent = text;
  svEl.follow.hidden = svLive.following;
  svForkLink(room, cur);
}

// The link to a fork of the lecture at the cycle on screen (ui/fork.py): not while the class answers
// a question about that cycle, nor for a recording (no decoder to fork).
function svForkLink(room, cur) {
  const cycle = cur ? Math.floor((cur - 1) / 5) : 0;  // step 5c + p: cycle c (timeline.py)
  const asked = room.poll && !room.poll.revealed && room.poll.cycle === cycle;
  svEl.fork.parentElement.hidden = !room.fork || room.waiting || asked || cur === null || cur === undefined;
  svEl.fork.href = `${svBody.dataset.app}?fork=${encodeURIComponent(svCode)}&cycle=${cycle}`;
  svEl.fork.textContent = `Try cycle ${cycle + 1} yourself ↗`;
}

// The room's answer as the stage's data: following, a new `seq` moves the stage to the lecturer's step;
// branched, the same `seq` and the step shown keep it where the student went.
function svTake(room) {
  if (svLive.room && svLive.room.run !== room.run) svLive.following = true;  // a new run: everyone follows into it
  svLive.room = room;
  svLive.since = room.version;
  if (svLive.following) svLive.seq = room.version;
  const view = svLive.following || svStage.state.cur === null ? room.step : svStage.state.cur;
  svStage.update({run: room.run, seq: svLive.seq, view, steps: room.steps, bodies: room.bodies, more: false,
                  follow: false, quiz: [], lecture: room.lecture,
                  end: 'This is as far as the lecturer has gone: Follow (F) to go on with them.'});
  svPoll(room.poll);
  svWhere();
}

async function svLoop() {
  for (let delay = 0; !svLive.stopped;) {
    try {
      if (delay) await new Promise(done => setTimeout(done, delay));
      await svJoin();
      const {status, answer} = await svPost({do: 'here', student: svLive.student, step: svStage.state.cur,
        following: svLive.following, since: svLive.since, have: [...svStage.state.bodies.keys()].map(Number)});
      if (status === 403) {  // not a student of this room (it was restarted): join afresh
        try { sessionStorage.removeItem(svKeyName); } catch (e) { /* nothing kept */ }
        svLive.student = null;
        delay = 500;
        continue;
      }
      if (status === 404 || status === 410) {
        svLive.stopped = true;
        svEl.where.textContent = answer.error || 'This live lecture has ended.';
        return;
      }
      if (status !== 200) throw new Error(answer.error || `the server answered ${status}`);
      svTake(answer);
      delay = 0;
    } catch (err) {
      svEl.where.textContent = err.status === 429  // the room's cap: its own words, and a later try
        ? `Cannot join: ${err.message}. Trying again in a moment…` : `Reconnecting… (${err.message || err})`;
      delay = Math.min(Math.max(2 * delay, 500), 5000);
    }
  }
}

function svBranch(act) {
  act();
  const room = svLive.room;
  svLive.following = !!room && svStage.state.cur === room.step && svLive.following;
  if (room && svStage.state.cur !== room.step) svLive.following = false;
  svWhere();
}

function svFollow() {
  svLive.following = true;
  if (svLive.room) svTake(svLive.room);
}

// The poll under the stage: the question, an answer button per option (yours marked); after the
// reveal, the class's counts beside the truth.
function svPoll(poll) {
  const box = svEl.poll;
  box.hidden = !poll;
  if (!poll) return;
  box.replaceChildren();
  const h = document.createElement('h2');
  h.textContent = poll.revealed ? `Revealed: ${poll.text}` : poll.text;
  box.append(h);
  const total = (poll.counts || []).reduce((a, b) => a + b, 0) || 1;
  poll.options.forEach((option, i) => {
    const row = document.createElement(poll.revealed ? 'div' : 'button');
    row.className = 'sv-option' + (poll.yours === i ? ' sv-yours' : '') + (poll.revealed && poll.truth === i ? ' sv-truth' : '');
    const label = document.createElement('span');
    label.textContent = option + (poll.yours === i ? ' — your answer' : '') + (poll.revealed && poll.truth === i ? ' ✓ the truth' : '');
    row.append(label);
    if (poll.revealed) {
      const bar = document.createElement('span');
      bar.className = 'sv-bar';
      bar.style.width = `${(100 * poll.counts[i]) / total}%`;
      const n = document.createElement('span');
      n.className = 'sv-count';
      n.textContent = String(poll.counts[i]);
      row.append(bar, n);
    } else {
      row.type = 'button';
      row.addEventListener('click', () => svAnswer(poll.number, i));
    }
    box.append(row);
  });
  const foot = document.createElement('p');
  foot.textContent = poll.revealed
    ? (poll.yours === null || poll.yours === undefined ? 'You did not answer this one.'
       : poll.yours === poll.truth ? 'You were right.' : 'Not this time: the stage shows why.')
    : `${poll.answered} answer${poll.answered === 1 ? '' : 's'} in. You can change yours until the reveal.`;
  box.append(foot);
}

async function svAnswer(number, option) {
  const {status, answer} = await svPost({do: 'answer', student: svLive.student, poll: number, option});
  if (status === 200) svPoll(answer);
  else svEl.where.textContent = answer.error || `The answer was not taken (${status}).`;
}

// ---------------------------------------------------------------- the other views (tabs)

function svTab(name) {
  svViews.tab = name;
  svViews.asked = svViews.key = null;
  for (const t of svEl.tabs) t.setAttribute('aria-selected', String(t.dataset.tab === name));
  const box = svEl.views;
  svPurge();
  box.replaceChildren();
  box.hidden = !name;
  box.setAttribute('aria-labelledby', `tab-${name || 'stage'}`);
  if (name === 'myths') box.append(document.getElementById('myths').content.cloneNode(true));
  else if (name) svViewRefresh();
}

function svPurge() {
  if (window.Plotly) svEl.views.querySelectorAll('.js-plotly-plot').forEach(el => window.Plotly.purge(el));
}

function svPlotly() {
  if (!svViews.plotly) {
    svViews.plotly = new Promise((done, fail) => {
      const script = document.createElement('script');
      script.src = svBody.dataset.plotly;
      script.onload = done;
      script.onerror = () => { svViews.plotly = null; fail(new Error('the charts could not be loaded')); };
      document.head.append(script);
    });
  }
  return svViews.plotly;
}

// The open tab's view of the step shown: asked once per step (the room builds it once for everyone),
// drawn only when it shows something else than what is drawn (its `key`); an answer overtaken by a
// newer ask is dropped.
async function svViewRefresh() {
  const tab = svViews.tab, run = svStage.state.run, step = svStage.state.cur;
  if ((tab !== 'charts' && tab !== 'stats') || step === null || step === undefined || !svLive.student) return;
  const asked = `${run}:${step}:${tab}:${svViews.pos}`;
  if (asked === svViews.asked) return;
  svViews.asked = asked;
  const want = ++svViews.want;
  svEl.views.setAttribute('aria-busy', 'true');
  try {
    const [{status, answer}] = await Promise.all([
      svPost({do: 'view', student: svLive.student, run, step, tab, pos: svViews.pos}), svPlotly()]);
    if (want !== svViews.want) return;
    if (status !== 200) {
      svViews.asked = null;
      if (status !== 409) svNote(answer.error || `the server answered ${status}`);  // 409: a new run, followed next
      return;
    }
    if (answer.key === svViews.key) return;
    svViews.key = answer.key;
    svPurge();
    svEl.views.innerHTML = answer.html;  // built by the server, every value escaped (viz/markup.py)
    svEl.views.querySelectorAll('.svf-fig').forEach(el => {
      const fig = answer.figures[Number(el.dataset.fig)];
      window.Plotly.newPlot(el, fig.data, fig.layout, {responsive: true, displaylogo: false});
    });
  } catch (err) {
    if (want === svViews.want) { svViews.asked = null; svNote(err.message || String(err)); }
  } finally {
    if (want === svViews.want) svEl.views.removeAttribute('aria-busy');
  }
}

function svNote(text) {
  const p = document.createElement('p');
  p.className = 'svf-note';
  p.textContent = `This view could not be shown: ${text}`;
  svPurge();
  svViews.key = null;
  svEl.views.replaceChildren(p);
}

svEl.tabs.forEach(t => t.addEventListener('click', () => svTab(t.dataset.tab)));
svEl.views.addEventListener('click', e => {
  const pos = e.target.closest && e.target.closest('.svf-pos');
  if (!pos) return;
  svViews.pos = Number(pos.dataset.pos);
  svViewRefresh();
});

// ← → on a focused tab move between the tabs (the tablist's own keys); elsewhere they step the stage.
function svTabKeys(e) {
  const at = svEl.tabs.indexOf(e.target);
  if (at < 0 || (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight') || e.altKey || e.ctrlKey || e.metaKey) return false;
  e.preventDefault();
  const to = svEl.tabs[(at + (e.key === 'ArrowRight' ? 1 : svEl.tabs.length - 1)) % svEl.tabs.length];
  to.focus();
  svTab(to.dataset.tab);
  return true;
}

svEl.next.addEventListener('click', () => svBranch(() => svStage.next()));
svEl.back.addEventListener('click', () => svBranch(() => svStage.back()));
svEl.follow.addEventListener('click', svFollow);
const svArrows = stageKeys({next: () => svBranch(() => svStage.next()), back: () => svBranch(() => svStage.back()),
                            nextCycle: () => svBranch(() => svStage.nextCycle())});
window.addEventListener('keydown', e => {
  if ((e.key === 'f' || e.key === 'F') && !e.ctrlKey && !e.metaKey && !e.altKey && !typing(e)) {
    e.preventDefault();
    svFollow();
    return;
  }
  if (svTabKeys(e)) return;
  svArrows(e);
}, true);
svLoop();
