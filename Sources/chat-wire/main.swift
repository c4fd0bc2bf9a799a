print("chat-wire: under construction")
