"""The arena's web page (one self-contained HTML document, no external assets)."""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Tempering arena</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 980px; margin: 1.5em auto; color: #222; }
input, textarea, button { font: inherit; padding: .35em .6em; }
.row { display: flex; gap: 1em; } .row > * { flex: 1; }
.answer { border: 1px solid #bbb; border-radius: 6px; padding: .8em; white-space: pre-wrap; min-height: 6em; }
.answer h3 { margin: 0 0 .4em 0; } .who { color: #0a6; font-weight: bold; }
#votes button { margin-right: .5em; } #error { color: #b00; }
table { border-collapse: collapse; margin-top: .5em; } td, th { border: 1px solid #ccc; padding: .25em .6em; }
</style></head>
<body>
<h1>Blind arena</h1>
<p>Two releases answer the same prompt. Vote for the better answer; the names show after your vote.
Your key is your annotator: one vote per battle, and a prompt you type is shown to you only.</p>
<div class="row">
  <label>API key <input id="key" type="password" autocomplete="off"></label>
</div>
<p><textarea id="prompt" rows="2" cols="80" placeholder="Your prompt (empty: one from the arena's prompts)"></textarea>
<label>Image <input id="image" type="file" accept="image/png,image/jpeg,image/webp,image/gif"></label>
<button id="next">Next battle</button></p>
<p id="error"></p>
<div id="battle" hidden>
  <p><b>Prompt:</b> <span id="shown-prompt"></span></p>
  <p><img id="shown-image" alt="the prompt's image" hidden style="width: 192px; image-rendering: pixelated; border: 1px solid #ccc"></p>
  <div class="row">
    <div class="answer"><h3>A <span class="who" id="who-a"></span></h3><div id="answer-a"></div></div>
    <div class="answer"><h3>B <span class="who" id="who-b"></span></h3><div id="answer-b"></div></div>
  </div>
  <p id="votes">
    <button data-choice="a">A is better</button><button data-choice="b">B is better</button>
    <button data-choice="tie">Tie</button><button data-choice="both_bad">Both are bad</button>
  </p>
</div>
<h2>Ranking</h2>
<p id="agreement"></p>
<table id="ranking"><thead><tr><th>model</th><th>rating</th><th>95% CI</th><th>W</th><th>L</th><th>T</th></tr></thead>
<tbody></tbody></table>
<script>
const $ = (id) => document.getElementById(id);
let battle = null;
async function call(method, path, body) {
  const r = await fetch(path, {method, headers: {"Authorization": "Bearer " + $("key").value,
                                                  "Content-Type": "application/json"},
                               body: body ? JSON.stringify(body) : undefined});
  const data = await r.json();
  if (!r.ok) throw new Error(data.error ? data.error.message : r.statusText);
  return data;
}
function show(err) { $("error").textContent = err ? String(err.message || err) : ""; }
async function next() {
  show(null);
  $("next").disabled = true;
  try {
    const body = {};
    if ($("prompt").value.trim()) body.prompt = $("prompt").value.trim();
    const file = $("image").files[0];
    if (file && body.prompt) body.image = await new Promise((ok, bad) => {
      const r = new FileReader(); r.onload = () => ok(r.result); r.onerror = bad; r.readAsDataURL(file); });
    battle = await call("POST", "/arena/battles", body);
    $("shown-prompt").textContent = battle.prompt;
    const img = $("shown-image");
    if (battle.image && battle.image.startsWith("data:image/")) { img.src = battle.image; img.hidden = false; }
    else { img.removeAttribute("src"); img.hidden = true; }
    $("answer-a").textContent = battle.a; $("answer-b").textContent = battle.b;
    $("who-a").textContent = ""; $("who-b").textContent = "";
    for (const b of document.querySelectorAll("#votes button")) b.disabled = false;
    $("battle").hidden = false;
  } catch (e) { show(e); } finally { $("next").disabled = false; }
}
async function vote(choice) {
  show(null);
  try {
    const r = await call("POST", "/arena/battles/" + battle.id + "/votes", {choice});
    $("who-a").textContent = r.reveal.a; $("who-b").textContent = r.reveal.b;
    for (const b of document.querySelectorAll("#votes button")) b.disabled = true;
    await rank();
  } catch (e) { show(e); }
}
async function rank() {
  const r = await call("GET", "/arena/ranking");
  const rows = r.ranking.map(m => `<tr data-model="${m.model}"><td>${m.model}</td><td class="rating">${m.rating}</td>` +
    `<td>${m.ci_low} – ${m.ci_high}</td><td>${m.wins}</td><td>${m.losses}</td><td>${m.ties}</td></tr>`);
  $("ranking").querySelector("tbody").innerHTML = rows.join("");
  const a = r.agreement;
  $("agreement").textContent = `${r.votes} votes on ${r.battles} battles; mean agreement ` +
    (a.mean_agreement === null ? "n/a" : a.mean_agreement) + `, Krippendorff alpha ` + (a.alpha === null ? "n/a" : a.alpha);
}
$("next").onclick = next;
for (const b of document.querySelectorAll("#votes button")) b.onclick = () => vote(b.dataset.choice);
</script>
</body></html>
"""
