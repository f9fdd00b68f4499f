"""Talking to the model server: the chat client, the wire shapes it reads, and the server probe (doctor)."""
