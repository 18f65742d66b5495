"""What answers the kiosk's riders: the prompts, the model runner and its llama.cpp serving,
and the scripted rule agent (spec §6)."""
