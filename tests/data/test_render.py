"""The assistant-only mask is exact, tool calls survive, and bad templates fail loudly.

Expected masks are built independently of `render_with_mask`: each template's output is
written out by hand as segments (prompt glue / assistant text), each segment tokenized on
its own, and the concatenation must equal the real render token for token.
"""

import copy
import json

import pytest

from tempering.data.render import IGNORE, TemplateError, detect_tool_call_style, render_with_mask
from tempering.data.toolcalls import parse_tool_calls
from tests.conftest import SEED_SAMPLE

# A Qwen2.5-style tool-capable template (no-tools branch), kept here as a test fixture.
QWEN_STYLE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) "
    "or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}'
    "{{- '\", \"arguments\": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture()
def qwen_tokenizer(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = QWEN_STYLE
    return tok


def expected(tokenizer, segments):
    """(ids, labels) from hand-written (text, is_assistant) segments."""
    ids, labels = [], []
    for text, is_assistant in segments:
        seg = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += seg
        labels += seg if is_assistant else [IGNORE] * len(seg)
    return ids, labels


def spans(ex, tokenizer):
    out, cur = [], []
    for i, lab in zip(ex.input_ids, ex.labels):
        if lab != IGNORE:
            cur.append(i)
        elif cur:
            out.append(tokenizer.decode(cur))
            cur = []
    return out + ([tokenizer.decode(cur)] if cur else [])


def test_smollm2_template_drops_tool_calls_so_tempering_form_is_used(smol_tokenizer):
    # Rendering the sample through the raw template loses the call: that is what we detect.
    raw = smol_tokenizer.apply_chat_template(SEED_SAMPLE["messages"], tokenize=False)
    assert "find . -name" not in raw
    assert detect_tool_call_style(smol_tokenizer) == "tempering"


def test_seed_sample_mask_exact_on_smollm2(smol_tokenizer):
    m = SEED_SAMPLE["messages"]
    call = json.dumps({"name": "shell", "arguments": {"cmd": "find . -name '*.py' | xargs wc -l"}})
    ids, labels = expected(
        smol_tokenizer,
        [
            (
                f"<|im_start|>system\n{m[0]['content']}<|im_end|>\n<|im_start|>user\n{m[1]['content']}<|im_end|>\n"
                "<|im_start|>assistant\n",
                False,
            ),
            (f"{m[2]['content']}\n<tool_call>{call}</tool_call><|im_end|>", True),
            ("\n<|im_start|>tool\n...command output...<|im_end|>\n<|im_start|>assistant\n", False),
            (f"{m[4]['content']}<|im_end|>", True),
            ("\n", False),
        ],
    )
    ex = render_with_mask(smol_tokenizer, m, detect_tool_call_style(smol_tokenizer))
    assert ex.input_ids == ids
    assert ex.labels == labels


def test_seed_sample_tool_call_survives_on_default_model(smol_tokenizer):
    ex = render_with_mask(smol_tokenizer, SEED_SAMPLE["messages"], detect_tool_call_style(smol_tokenizer))
    first_turn = spans(ex, smol_tokenizer)[0]
    parsed = parse_tool_calls(first_turn.removesuffix("<|im_end|>"))
    assert parsed.calls == SEED_SAMPLE["messages"][2]["tool_calls"]
    assert parsed.content == SEED_SAMPLE["messages"][2]["content"]
    assert parsed.errors == []


def test_seed_sample_mask_exact_on_qwen_style_template(qwen_tokenizer):
    assert detect_tool_call_style(qwen_tokenizer) == "template"
    m = SEED_SAMPLE["messages"]
    args = json.dumps({"cmd": "find . -name '*.py' | xargs wc -l"})
    ids, labels = expected(
        qwen_tokenizer,
        [
            (
                f"<|im_start|>system\n{m[0]['content']}<|im_end|>\n<|im_start|>user\n{m[1]['content']}<|im_end|>\n"
                "<|im_start|>assistant\n",
                False,
            ),
            (f'{m[2]["content"]}\n<tool_call>\n{{"name": "shell", "arguments": {args}}}\n</tool_call><|im_end|>', True),
            (
                "\n<|im_start|>user\n<tool_response>\n...command output...\n</tool_response><|im_end|>\n"
                "<|im_start|>assistant\n",
                False,
            ),
            (f"{m[4]['content']}<|im_end|>", True),
            ("\n", False),
        ],
    )
    ex = render_with_mask(qwen_tokenizer, m, "template")
    assert ex.input_ids == ids
    assert ex.labels == labels
    assert parse_tool_calls(spans(ex, qwen_tokenizer)[0]).calls == m[2]["tool_calls"]


def test_default_system_prompt_and_multi_turn_mask(smol_tokenizer):
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    ex = render_with_mask(smol_tokenizer, msgs, "tempering")
    assert spans(ex, smol_tokenizer) == ["b<|im_end|>", "d<|im_end|>"]
    text = smol_tokenizer.decode(ex.input_ids)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_a_weight_0_turn_is_context_with_the_same_ids(smol_tokenizer):
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "wrong", "weight": 0},
        {"role": "user", "content": "error: try again"},
        {"role": "assistant", "content": "right", "weight": 1},
    ]
    ex = render_with_mask(smol_tokenizer, msgs, "tempering")
    assert spans(ex, smol_tokenizer) == ["right<|im_end|>"]
    plain = render_with_mask(smol_tokenizer, [{k: v for k, v in m.items() if k != "weight"} for m in msgs], "tempering")
    assert ex.input_ids == plain.input_ids  # the weight changes the mask, never the text
    assert spans(plain, smol_tokenizer) == ["wrong<|im_end|>", "right<|im_end|>"]


def test_template_dropping_tool_results_is_an_error(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'tool' %}<|im_start|>{{ m['role'] }}\n"
        "{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    )
    with pytest.raises(TemplateError, match="drops the content of 'tool' turns"):
        detect_tool_call_style(tok)


def test_template_with_unparseable_native_tool_calls_is_an_error(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "{% for c in m.get('tool_calls', []) %}CALL {{ c['name'] }}({{ c['arguments'] }}){% endfor %}"
        "<|im_end|>\n{% endfor %}"
    )
    with pytest.raises(TemplateError, match="cannot parse back"):
        detect_tool_call_style(tok)


def test_template_that_is_not_prefix_consistent_fails_clearly(smol_tokenizer):
    # Renders the last message differently from earlier ones (like "thinking" stripping).
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if loop.last %}[last] {% endif %}"
        "{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    with pytest.raises(TemplateError, match="not prefix-consistent"):
        render_with_mask(tok, msgs, "tempering")


def test_parse_tool_calls_reports_bad_blocks():
    text = 'ok\n<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n<tool_call>{oops}</tool_call>'
    parsed = parse_tool_calls(text)
    assert parsed.calls == [{"name": "a", "arguments": {"x": 1}}]
    assert len(parsed.errors) == 1 and "invalid JSON" in parsed.errors[0]
    assert parsed.content == "ok"
    assert parse_tool_calls('<tool_call>{"name": "a"').errors == ["unterminated <tool_call> block"]
