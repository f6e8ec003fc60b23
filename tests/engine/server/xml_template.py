"""A chat template written here in the Qwen3.5 / Qwen3-Coder tool style: calls as
`<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>`
(string values raw, others JSON), results as `<tool_response>` user turns."""

XML_TOOLS = r'''{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Reply with <tool_call>
<function=NAME>
<parameter=NAME>
VALUE
</parameter>
</function>
</tool_call> to call one.<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}
{%- for call in message.tool_calls or [] %}
<tool_call>
<function={{ call.function.name }}>
{% for key, value in call.function.arguments | items %}<parameter={{ key }}>
{{ value if value is string else value | tojson }}
</parameter>
{% endfor %}</function>
</tool_call>
{%- endfor %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}'''
