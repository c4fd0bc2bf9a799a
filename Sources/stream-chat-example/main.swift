print("stream-chat-example: under construction")
