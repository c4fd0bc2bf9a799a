print("chat-server: under construction")
