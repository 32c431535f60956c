// The standalone run page's glue (viz/standalone.py): read the sections into the stage's data, then
// step locally. No server to ask.
document.documentElement.classList.add('js');
const svSteps = {};
document.querySelectorAll('section.step').forEach((sec, i) => {
  svSteps[String(i)] = {
    title: sec.dataset.title, kv: [sec.querySelector('.kv').innerHTML],
    status: sec.querySelector('.status').innerHTML, story: sec.querySelector('.story').innerHTML,
    strip: sec.querySelector('.strip').innerHTML,
  };
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
