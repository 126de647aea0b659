// llama.cpp as a benchmark peer through node-llama-cpp's prebuilt CPU binaries (npm), for a
// machine where llama-cpp-python cannot be built. Reads one JSON job on stdin:
//   {"gguf": PATH, "prompts": [[token ids]], "max_new_tokens": N, "threads": T,
//    "sequences": S, "rounds": R}
// sequences 1: the prompts one at a time (single stream); S > 1: all prompts at once over S
// sequences of one context, which llama.cpp decodes in one batch (as its server's parallel slots).
// Greedy (temperature 0), an end-of-generation token stops a request. Prints one JSON line:
// per round the wall seconds (prefill included) and generated tokens, and the last round's answers.
// The package directory is $TEMPERING_NODE_LLAMA_CPP (where `npm install node-llama-cpp` ran).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const job = JSON.parse(readFileSync(0, "utf8"));
const dir = process.env.TEMPERING_NODE_LLAMA_CPP;
const lib = await import(pathToFileURL(join(dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await lib.getLlama({ gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: job.gguf, gpuLayers: 0 });
const sequences = job.sequences ?? 1;
const longest = Math.max(...job.prompts.map((p) => p.length));
const context = await model.createContext({
  contextSize: sequences * (longest + job.max_new_tokens + 8),
  sequences,
  threads: job.threads,
  batchSize: 512,
});

async function one(sequence, prompt) {
  const out = [];
  await sequence.clearHistory();
  for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
    if (model.isEogToken(token)) break;
    out.push(token);
    if (out.length >= job.max_new_tokens) break;
  }
  return out;
}

const slots = Array.from({ length: sequences }, () => context.getSequence());
async function round(prompts) {
  const t0 = performance.now();
  let answers;
  if (sequences === 1) {
    answers = [];
    for (const p of prompts) answers.push(await one(slots[0], p));
  } else {
    answers = new Array(prompts.length);
    let next = 0;
    await Promise.all(
      slots.map(async (s) => {
        while (next < prompts.length) {
          const i = next++;
          answers[i] = await one(s, prompts[i]);
        }
      }),
    );
  }
  const seconds = (performance.now() - t0) / 1000;
  return { seconds, generated_tokens: answers.reduce((n, a) => n + a.length, 0), answers };
}

await round([job.prompts[0].slice(0, 8)]); // warm-up
const runs = [];
let last;
for (let r = 0; r < (job.rounds ?? 1); r++) {
  last = await round(job.prompts);
  runs.push({ seconds: last.seconds, generated_tokens: last.generated_tokens });
}
const gpu = llama.gpu;
console.log(
  JSON.stringify({
    runs,
    answers: last.answers,
    node_llama_cpp: lib.getModuleVersion ? await lib.getModuleVersion() : null,
    llama_cpp_build: llama.llamaCppRelease ?? null,
    gpu,
    threads: job.threads,
    sequences,
  }),
);
await context.dispose();
await model.dispose();
await llama.dispose();
