"""The OpenAI Responses API: its requests checked and translated to chat completions, chat
answers and streams translated back."""
