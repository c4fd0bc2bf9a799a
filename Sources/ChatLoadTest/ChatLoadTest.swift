/// Placeholder; replaced by the load generator.
public enum ChatLoadTestModule {}
