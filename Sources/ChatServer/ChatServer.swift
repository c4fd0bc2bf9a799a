/// Placeholder; replaced by the chat state.
public enum ChatServerModule {}
