"""Pairs render token-exactly: one shared prompt, ids(prompt) + ids(answer) == ids(render(full)).

Checked on SmolLM2's template (tool calls written in Tempering's form) and on a
Qwen2.5-style template (tool calls written by the template), including tool calls in the
prompt and in a multi-turn answer; expected tokens come from hand-written segments.
"""

import copy
import json

import pytest

from tempering.data.pair_render import render_pair, render_pairs
from tempering.data.preference import check_pair, load_pairs
from tempering.data.render import TemplateError, detect_tool_call_style, prepare_messages
from tests.data.test_render import expected, qwen_tokenizer  # noqa: F401  (fixture)

SIMPLE = {"prompt": "What is 2+2?", "chosen": "4", "rejected": "The answer is 5."}
CALL = {"name": "shell", "arguments": {"cmd": "ls"}}
TOOLS = {
    "prompt": [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "List files."},
        {"role": "assistant", "content": "Listing.", "tool_calls": [CALL]},
        {"role": "tool", "content": "a.py b.py"},
    ],
    "chosen": [{"role": "assistant", "content": "a.py, b.py"}],
    "rejected": [
        {"role": "assistant", "content": "Again.", "tool_calls": [CALL]},
        {"role": "tool", "content": "a.py b.py"},
        {"role": "assistant", "content": "a.py"},
    ],
}
MULTI = {
    "prompt": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "2+3?"},
    ],
    "chosen": "5",
    "rejected": "6",
}


def full_ids(tok, pair, side):
    style = detect_tool_call_style(tok)
    text = tok.apply_chat_template(prepare_messages(pair.conversation(side), style), tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def scored_text(tok, ids, mask):
    return tok.decode([i for i, m in zip(ids, mask) if m])


@pytest.mark.parametrize("row", [SIMPLE, TOOLS, MULTI], ids=["string", "tools", "multi-turn"])
@pytest.mark.parametrize("which", ["smol", "qwen"])
def test_shared_prompt_and_concatenation_property(row, which, smol_tokenizer, qwen_tokenizer):
    tok = smol_tokenizer if which == "smol" else qwen_tokenizer
    pair = check_pair(row)
    r = render_pair(tok, pair, detect_tool_call_style(tok))
    for side in ("chosen", "rejected"):
        full = full_ids(tok, pair, side)
        assert r.prompt_ids + r.ids(side) == full
        text = tok.decode(full)
        assert text.count("<|im_start|>system") == 1  # no duplicated default system prompt
        n_turns = len(pair.prompt_messages()) + len(pair.completion_messages(side))
        assert text.count("<|im_end|>") == n_turns + ("system" not in [m["role"] for m in pair.prompt_messages()])
        assert tok.eos_token_id not in r.prompt_ids[-3:]  # the prompt ends with the assistant header
        n_assistant = sum(m["role"] == "assistant" for m in pair.completion_messages(side))
        assert sum(1 for i, m in zip(r.ids(side), r.mask(side)) if m and i == tok.eos_token_id) == n_assistant


def test_tool_pair_tokens_on_qwen_style_template(qwen_tokenizer):
    pair = check_pair(TOOLS)
    r = render_pair(qwen_tokenizer, pair, "template")
    call = '<tool_call>\n{"name": "shell", "arguments": {"cmd": "ls"}}\n</tool_call>'
    prompt = (
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nList files.<|im_end|>\n"
        f"<|im_start|>assistant\nListing.\n{call}<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\na.py b.py\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    ids, _ = expected(qwen_tokenizer, [(prompt, False)])
    assert r.prompt_ids == ids
    ids, labels = expected(
        qwen_tokenizer,
        [
            (f"Again.\n{call}<|im_end|>", True),
            (
                "\n<|im_start|>user\n<tool_response>\na.py b.py\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
                False,
            ),
            ("a.py<|im_end|>", True),
            ("\n", False),
        ],
    )
    assert r.rejected_ids == ids
    assert r.rejected_mask == [int(label != -100) for label in labels]
    assert scored_text(qwen_tokenizer, r.chosen_ids, r.chosen_mask) == "a.py, b.py<|im_end|>"


def test_tool_pair_on_smollm2_writes_calls_in_tempering_form(smol_tokenizer):
    pair = check_pair(TOOLS)
    r = render_pair(smol_tokenizer, pair, "tempering")
    call = f"<tool_call>{json.dumps(CALL)}</tool_call>"
    assert smol_tokenizer.decode(r.prompt_ids).endswith(
        f"Listing.\n{call}<|im_end|>\n<|im_start|>tool\na.py b.py<|im_end|>\n<|im_start|>assistant\n"
    )
    assert scored_text(smol_tokenizer, r.rejected_ids, r.rejected_mask) == f"Again.\n{call}<|im_end|>a.py<|im_end|>"


def test_template_that_merges_tokens_across_the_boundary_fails(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    # no separators: "hel" + "lo" tokenises differently once joined
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(TemplateError):
        render_pair(tok, check_pair({"prompt": "hel", "chosen": "lo", "rejected": "p"}), "tempering")


def test_over_long_pairs_are_quarantined(tmp_path, smol_tokenizer):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(SIMPLE) + "\n" + json.dumps({**SIMPLE, "rejected": "word " * 400}) + "\n")
    loaded = load_pairs([path])
    out = render_pairs(loaded, smol_tokenizer, "tempering", max_length=128)
    assert len(out) == 1 and loaded.summary() == {"rows": 2, "valid": 1, "quarantined": 1}
    assert str(loaded.errors[0]).startswith(f"{path}:2: over max length")
