"""Build a tiny random-weight Llama and a byte-level BPE tokenizer trained on the spot (no download).

    python make_tiny_llama.py OUT_DIR

The text it writes is noise, but a real vLLM serves it with real bodies, errors, structured output and
metrics. hidden 128 with 2 heads (head_dim 64): the CPU attention kernel refuses head_dim below 32.
"""

from __future__ import annotations

import sys
from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    '{"answer": "42", "steps": ["add", "multiply"], "confidence": 0.9}',
    "```python\ndef f(x):\n    return x * 2\n```",
    "Step 1: add the numbers. Step 2: the answer is \\boxed{12}.",
    "<|ref|>car<|/ref|><|det|>[[10,20,30,40]]<|/det|>",
    "user assistant system: hello, how are you? I am fine, thanks.",
] * 50

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] if m['content'] is string else '' }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def main(out: Path) -> None:
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=1024, min_frequency=1, special_tokens=specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>", model_max_length=2048
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out)
    print(f"tiny Llama in {out} (vocab {len(tokenizer)})")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tiny-llama"))
