print("chat-loadtest: under construction")
