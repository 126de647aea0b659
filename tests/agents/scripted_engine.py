"""`PolicyEngine`: an `Engine` whose 'sampling' is a scripted policy, for exact token tests.

It reads the task and the turn from the prompt ids it is given (the user prompt and the
number of assistant headers), writes the policy's text as tokens and ends the turn with
the end-of-turn token (or cuts it at `max_new_tokens`, finish "length"). Every call is
recorded, so a test can compare what the engine saw and sampled with the trajectory.
`char_tokens` writes one token per character: a valid sampling that re-tokenising the
text would never reproduce.
"""

from tempering.agents.tasks import AgentTask
from tempering.rollout.engine import Completion


class PolicyEngine:
    precision = "fp32"
    identity = "policy-engine"

    def __init__(self, tokenizer, policy, tasks: list[AgentTask], native: bool = False, char_tokens: bool = False):
        self.tokenizer, self.policy, self.tasks = tokenizer, policy, tasks
        self.native, self.char_tokens = native, char_tokens
        self.calls: list[tuple[list[int], list[int]]] = []

    def chat_prompt(self, messages):
        raise NotImplementedError

    def sync_weights(self, weights):
        pass

    def _encode(self, text: str) -> list[int]:
        if self.char_tokens:
            return [i for ch in text for i in self.tokenizer(ch, add_special_tokens=False)["input_ids"]]
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts, params):
        out = []
        for i, prompt in enumerate(prompts):
            text = self.tokenizer.decode(prompt)
            task = max((t for t in self.tasks if t.prompt in text), key=lambda t: len(t.prompt))
            turn = text.count("<|im_start|>assistant") - 1
            reply = self.policy(task, [{"role": "assistant"}] * turn)
            if self.native:
                reply = reply.replace("<tool_call>", "<tool_call>\n").replace("</tool_call>", "\n</tool_call>")
            ids = self._encode(reply) + [self.tokenizer.eos_token_id]
            finish = "stop"
            if len(ids) > params.max_new_tokens:
                ids, finish = ids[: params.max_new_tokens], "length"
            logprobs = [-0.25 - 0.01 * k for k in range(len(ids))]
            self.calls.append((list(prompt), ids))
            out.append(
                [Completion(i, ids, logprobs, self.tokenizer.decode(ids[:-1] if finish == "stop" else ids), finish)]
            )
        return out
