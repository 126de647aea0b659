"""The tool-call parser reports every block it cannot read, however it fails."""

from tempering.data.toolcalls import parse_tool_calls


def test_a_call_nested_past_the_recursion_limit_is_an_error_not_an_exception():
    deep = '<tool_call>{"name": "shell", "arguments": {"cmd": ' + "[" * 5000 + "]" * 5000 + "}}</tool_call>"
    parsed = parse_tool_calls("let me look\n" + deep + '\n<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert parsed.calls == [{"name": "submit", "arguments": {}}]
    assert len(parsed.errors) == 1 and parsed.errors[0].startswith("invalid JSON in tool call (nested too deeply)")
    assert parsed.content == "let me look"
