print("chat-client: under construction")
