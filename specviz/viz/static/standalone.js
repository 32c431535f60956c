// The standalone run page's glue (viz/standalone.py): read the sections into the stage's data, then
// step locally. No server to ask. Each part of a step (SV_PARTS) is a box of its section, named by
// `data-part` (a list part: one box per fragment).
document.documentElement.classList.add('js');
const svSteps = {};
document.querySelectorAll('section.step').forEach((sec, i) => {
  const step = {title: sec.dataset.title};
  for (const part of SV_PARTS) {
    const boxes = [...sec.querySelectorAll(':scope > [data-part]')].filter(e => e.dataset.part === part.name);
    step[part.name] = part.many ? boxes.map(e => e.innerHTML) : boxes.length ? boxes[0].innerHTML : '';
  }
  svSteps[String(i)] = step;
});
const svCounter = document.getElementById('counter');
const svTotal = Object.keys(svSteps).length;
const svStage = createStage(document.getElementById('stage'), {
  shown: (step, d) => { svCounter.textContent = `step ${step + 1} of ${svTotal} · ${d.title}`; },
});
// The lecture layout (viz/standalone.py): the stage's lecture classes, as the app's lecture mode.
svStage.update({run: 0, seq: 0, view: 0, steps: svSteps, more: false, follow: false, quiz: [],
  lecture: document.getElementById('stage').dataset.lecture === '1', end: 'This is the last step of the run.'});
document.getElementById('next').onclick = () => svStage.next();
document.getElementById('back').onclick = () => svStage.back();
window.addEventListener('keydown', stageKeys(svStage), true);
window.__specvizStage = svStage;
