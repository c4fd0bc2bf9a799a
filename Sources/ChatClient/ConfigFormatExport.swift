// The config file's format (`ConfigFile`) is shared with chat-server's `--config`, so it lives in
// its own target; the client's users and tests keep reaching it through `import ChatClient`.
@_exported import ConfigFormat
