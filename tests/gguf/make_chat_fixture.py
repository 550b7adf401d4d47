#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates.json: chat templates, message lists, and what jinja2
renders (the way transformers does: trim_blocks, lstrip_blocks, bos_token set), so
test_gguf_chat.c can check model/chat_template.c against real Jinja evaluation.

Templates: SmolLM2's own (read from the GGUF that tools/fetch-smollm2.sh provides, or argv[1]),
a Qwen2.5-style ChatML with a default system message and a tools branch, a bare ChatML, Llama-3
and a Llama-3.1-style template, plus two unrecognised families (Mistral, Gemma).
Run: python3 tests/gguf/make_chat_fixture.py [GGUF] (needs gguf, jinja2)."""
import importlib.metadata as md
import json
import os
import subprocess
import sys

import gguf
import jinja2

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

CHATML = r"""{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"""

LLAMA3 = r"""{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"""

LLAMA31 = r"""{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

MISTRAL = r"""{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}"""

GEMMA = r"""{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"""

MESSAGES = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "  What's 2+2?\n"}],
    [{"role": "user", "content": "Line1\nLine2 'quoted' \"dq\" \\ back"},
     {"role": "assistant", "content": "\tok "}],
    [{"role": "system", "content": " sys "}],
]


def smollm2_template():
    path = sys.argv[1] if len(sys.argv) > 1 else subprocess.run(
        [os.path.join(ROOT, "tools", "fetch-smollm2.sh")], check=True, capture_output=True,
        text=True).stdout.strip()
    return gguf.GGUFReader(path).fields["tokenizer.chat_template"].contents()


def main():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    templates = [("smollm2", smollm2_template(), "chatml"), ("qwen2.5", QWEN25, "chatml"),
                 ("chatml", CHATML, "chatml"), ("llama3", LLAMA3, "llama3"),
                 ("llama3.1", LLAMA31, "llama3"), ("mistral", MISTRAL, None),
                 ("gemma", GEMMA, None)]
    bos = "<|begin_of_text|>"
    out = []
    for name, text, family in templates:
        cases = []
        if family:
            tmpl = env.from_string(text)
            for msgs in MESSAGES:
                for gen in (True, False):
                    cases.append({"messages": msgs, "add_generation_prompt": gen,
                                  "expected": tmpl.render(messages=msgs, add_generation_prompt=gen,
                                                          bos_token=bos, eos_token="</s>")})
        out.append({"name": name, "template": text, "family": family, "bos": bos,
                    "cases": cases})
    path = os.path.join(ROOT, "tests", "fixtures", "chat_templates.json")
    with open(path, "w") as f:
        json.dump({"generator": "tests/gguf/make_chat_fixture.py",
                   "jinja2": md.version("jinja2"), "templates": out}, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
