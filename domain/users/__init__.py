"""The user lifecycle: users, the claims of their client_user_ids, and the use cases on them."""
