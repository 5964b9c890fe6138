"""The OpenAI wire: chat and embeddings bodies checked cheaply, prompt tokens counted."""
