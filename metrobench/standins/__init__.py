"""Local stand-ins for the services this machine cannot reach, on 127.0.0.1, in their real wire formats.

Used by the tests (imported from here) and by the dress
rehearsal (:mod:`metrobench.rehearsal`), which serves the paper config's hosted
rows, its judge and the Hugging Face Hub from them:

* :mod:`.json_server`: a JSON-over-HTTP server, requests recorded, answers decided by a subclass;
* :mod:`.openai_api`: OpenAI chat completions, Azure chat and the Responses API;
* :mod:`.messages_api`: the Anthropic Messages API;
* :mod:`.hf_hub`: the Hugging Face Hub's API, file resolution and its CDN.

Each binds the port it is given (0: a free one) and is used as a context manager.
"""
