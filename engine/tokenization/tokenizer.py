"""The engine's tokenizer: HF `tokenizers` plus the model's chat template and stop ids.

Two sources: a Hugging Face / MLX model folder (tokenizer.json and its config
files) or a GGUF file's metadata. Both end up as one `tokenizers.Tokenizer`,
so encoding, decoding and streaming behave the same whichever was loaded.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from engine.errors import InvalidRequestError, ModelLoadError
from engine.tokenization.chat_prompt import ChatPrompt, prepare_messages
from engine.tokenization.chat_template import render_chat_template
from engine.tokenization.detokenizer import IncrementalDetokenizer
from engine.tokenization.gguf_tokenizer import build_gguf_tokenizer
from engine.tokenization.messages import check_messages, check_text
from engine.tokenization.special_text import SpecialTextGuard

Prompt = str | list[dict] | list[int] | ChatPrompt
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path} is not valid JSON ({e}). Re-download the model.") from e


def _token_content(value: Any) -> str | None:
    # tokenizer_config stores special tokens as a string or a serialized AddedToken dict.
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _pick_template(value: Any) -> str | None:
    # Some checkpoints ship several named templates; "default" is the chat one.
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        return named.get("default") or next(iter(named.values()), None)
    return value if isinstance(value, str) else None


def _find_chat_template(folder: Path, config: dict) -> str | None:
    # Newer checkpoints keep the template beside tokenizer_config.json; it wins, as in transformers.
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    from_json = _pick_template(_read_json(folder / "chat_template.json").get("chat_template"))
    return from_json or _pick_template(config.get("chat_template"))


class Tokenizer:
    """Encode prompts, decode ids, and know which ids end a reply."""

    def __init__(self, hf: HFTokenizer, *, chat_template: str | None,
                 special_tokens: dict[str, str | None], eos_token_ids: Iterable[int],
                 bos_token_id: int | None):
        self._hf = hf
        self._chat_template = chat_template
        self._special_tokens = dict(special_tokens)
        self._eos_token_ids = frozenset(int(i) for i in eos_token_ids)
        self._bos_token_id = bos_token_id
        self._guard = SpecialTextGuard(hf)
        # "The tokenizer says so": its own post-processor puts BOS in front of plain text.
        probe = hf.encode("a", add_special_tokens=True).ids
        self._add_bos = bos_token_id is not None and bool(probe) and probe[0] == bos_token_id

    # ---- construction -------------------------------------------------------------

    @classmethod
    def from_folder(cls, path: str | Path) -> Tokenizer:
        folder = Path(path)
        tokenizer_file = folder / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise ModelLoadError(
                f"No tokenizer.json in {folder}. Tandem needs the fast (tokenizer.json) tokenizer; "
                "re-download the model with its tokenizer files, or pick an MLX/HF folder that has it.")
        try:
            hf = HFTokenizer.from_file(str(tokenizer_file))
        except Exception as e:  # the Rust side raises a plain Exception on bad files
            raise ModelLoadError(f"{tokenizer_file} could not be read ({e}). Re-download it.") from e
        config = _read_json(folder / "tokenizer_config.json")
        special = {name: _token_content(config.get(name)) for name in _SPECIAL_NAMES}
        eos_ids = set(_as_id_list(_read_json(folder / "generation_config.json").get("eos_token_id")))
        eos_ids.update(_as_id_list(_read_json(folder / "config.json").get("eos_token_id")))
        if special["eos_token"] is not None and hf.token_to_id(special["eos_token"]) is not None:
            eos_ids.add(hf.token_to_id(special["eos_token"]))
        bos = special["bos_token"]
        return cls(hf, chat_template=_find_chat_template(folder, config), special_tokens=special,
                   eos_token_ids=eos_ids,
                   bos_token_id=hf.token_to_id(bos) if bos is not None else None)

    @classmethod
    def from_gguf(cls, metadata: dict) -> Tokenizer:
        """`metadata` as returned by `mx.load(path, return_metadata=True)[1]`."""
        info = build_gguf_tokenizer(metadata)
        hf = info.tokenizer
        eos_ids = {info.eos_token_id} if info.eos_token_id is not None else set()
        # llama.cpp also stops on end-of-turn / end-of-message ids where the file names them.
        for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
            if metadata.get(key) is not None:
                eos_ids.add(int(metadata[key].item() if hasattr(metadata[key], "item")
                                else metadata[key]))
        special = {
            "bos_token": hf.id_to_token(info.bos_token_id) if info.bos_token_id is not None else None,
            "eos_token": hf.id_to_token(info.eos_token_id) if info.eos_token_id is not None else None,
        }
        return cls(hf, chat_template=info.chat_template, special_tokens=special,
                   eos_token_ids=eos_ids, bos_token_id=info.bos_token_id)

    # ---- properties ---------------------------------------------------------------

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos_token_ids

    @property
    def bos_token_id(self) -> int | None:
        return self._bos_token_id

    @property
    def add_bos_token(self) -> bool:
        return self._add_bos

    @property
    def vocab_size(self) -> int:
        return self._hf.get_vocab_size(with_added_tokens=True)

    @property
    def has_chat_template(self) -> bool:
        return self._chat_template is not None

    @property
    def chat_template(self) -> str | None:
        return self._chat_template

    # ---- encode / decode ----------------------------------------------------------

    def backend_json(self) -> str:
        """The tokenizer as tokenizer.json text (for grammar engines such as llguidance)."""
        return self._hf.to_str()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._hf.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        return self._hf.id_to_token(token_id)

    def token_to_id(self, token: str) -> int | None:
        return self._hf.token_to_id(token)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            **template_vars: Any) -> str:
        """Render with the model's own template; extra vars (e.g. enable_thinking) pass through."""
        if self._chat_template is None:
            raise InvalidRequestError(
                "This model has no chat template. Send plain text or token ids, "
                "or add chat_template to its tokenizer_config.json.")
        return render_chat_template(self._chat_template, check_messages(messages),
                                    add_generation_prompt=add_generation_prompt,
                                    special_tokens=self._special_tokens, **template_vars)

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids for a prompt: raw ids as is, a str as one user message, or messages.

        Text is the user's: a special-token string in it is encoded as ordinary text
        (only the chat template's own markers are special). Send token ids to write
        special tokens yourself.
        """
        if isinstance(prompt, list) and prompt and all(_is_id(t) for t in prompt):
            return list(prompt)
        if isinstance(prompt, ChatPrompt):
            return self._encode_chat(prompt)
        if isinstance(prompt, str):
            check_text(prompt, "The prompt")
            if not self.has_chat_template:
                return self._with_bos(self._guard.encode_text(prompt))
            prompt = [{"role": "user", "content": prompt}]
        if not isinstance(prompt, list) or not prompt:
            raise InvalidRequestError(
                f"A prompt must be text, a non-empty list of messages, or a non-empty list of "
                f"token ids; got {type(prompt).__name__}{' (empty)' if prompt == [] else ''}.")
        return self._encode_chat(ChatPrompt(prompt))

    def render_chat(self, prompt: ChatPrompt) -> str:
        """The text the model reads for `prompt` (tools and tool history included)."""
        return self._render_chat(prompt, escape=False)[0]

    def _render_chat(self, prompt: ChatPrompt, escape: bool) -> tuple[str, dict]:
        if not prompt.messages:
            raise InvalidRequestError("A chat prompt needs at least one message.")
        check_messages(prompt.messages)
        messages, tools = prepare_messages(prompt, self._chat_template)
        messages, restore = self._guard.escape(messages) if escape else (messages, {})
        return self.apply_chat_template(messages, tools=tools, **prompt.template_vars), restore

    def _encode_chat(self, prompt: ChatPrompt) -> list[int]:
        """Messages with tool calls and results, and tools, through the model's template."""
        rendered, restore = self._render_chat(prompt, escape=True)
        return self._with_bos(self._guard.encode_rendered(rendered, restore))

    def _with_bos(self, ids: list[int]) -> list[int]:
        # Templates such as Llama 3's write the BOS text themselves; never add a second one.
        if self._add_bos and (not ids or ids[0] != self._bos_token_id):
            return [self._bos_token_id, *ids]
        return ids

    def detokenizer(self, skip_special_tokens: bool = False) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self, skip_special_tokens=skip_special_tokens)


def _is_id(t: Any) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)
