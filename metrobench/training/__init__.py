"""The PEFT stage: teacher-trace training sets, QLoRA training, merging and GGUF export."""
