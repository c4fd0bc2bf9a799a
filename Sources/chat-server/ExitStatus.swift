/// What `chat-server` exits with, and so what its systemd unit restarts after
/// (Scripts/systemd/chat-server.service: `Restart=on-failure`, `RestartPreventExitStatus=` the
/// start-up refusals below). One table, in docs/OPERATIONS.md too; `ServiceContractTests` holds
/// the unit to it.
///
/// The rule: a refusal that would only repeat itself (a typo, a bad config file, an unreadable
/// certificate, a data directory another server holds) is not restarted; a server that ran and
/// then could not go on (its data directory gone, a crash) is.
enum ExitStatus {
    /// Stopped by SIGTERM or SIGINT after its graceful shutdown; `--check-config`, `check` and
    /// `backup` that found nothing wrong.
    static let success: Int32 = 0
    /// Refused at start: the data directory (locked, unusable, others could change it, not a
    /// database, too new), the chat, plain-text or metrics address. Also `--status` when no
    /// status page can be read, and a command's data directory that does not exist or others
    /// could change.
    static let startupRefused: Int32 = 1
    /// Refused at start: the TLS certificate or key cannot be used.
    static let tlsUnusable: Int32 = 2
    /// A command line ArgumentParser refuses: an unknown flag, a bad value (EX_USAGE, its own).
    static let usage: Int32 = 64
    /// `chat-server check` found the directory damaged (EX_DATAERR).
    static let dataDamaged: Int32 = 65
    /// The data directory was deleted or replaced while the server ran (EX_IOERR): it exits
    /// rather than write into whatever is at its path now; a restart starts on what is there.
    static let dataDirectoryLost: Int32 = 74
    /// The config file cannot be read or used, or a check of its values fails (alone or with
    /// another setting's); the message names its line (EX_CONFIG).
    static let config: Int32 = 78

    /// `--status`'s status for a server that answers but is unhealthy (same number as
    /// `tlsUnusable`: the two never meet, one is a serving process's, the other a query's).
    static let unhealthy: Int32 = 2
}
