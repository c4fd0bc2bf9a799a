extension ChatServerConfiguration {
    /// The settings a running server takes from a reloaded configuration (SIGHUP, `chat-server
    /// --config`), by their flag names: the limits the chat reads each time it applies them, the
    /// message of the day, the server operators and the TLS files. The rest — addresses, ports,
    /// the memory budget and what it is divided by (`--max-clients`, `--max-frame-size`,
    /// `--history-size`), timeouts, storage — shape what was built at start and take effect at
    /// the next start.
    ///
    /// One list, so that `applyingLiveSettings(of:)`, the reload's log line and docs/OPERATIONS.md
    /// say the same thing.
    public static let liveSettings: [(flag: String, changed: @Sendable (ChatServerConfiguration, ChatServerConfiguration) -> Bool)] = [
        ("rate-limit", { $0.messageRate != $1.messageRate }), ("rate-burst", { $0.messageBurst != $1.messageBurst }),
        ("byte-rate", { $0.byteRate != $1.byteRate }), ("byte-burst", { $0.byteBurst != $1.byteBurst }),
        ("address-rate-limit", { $0.addressMessageRate != $1.addressMessageRate }),
        ("address-rate-burst", { $0.addressMessageBurst != $1.addressMessageBurst }),
        ("address-byte-rate", { $0.addressByteRate != $1.addressByteRate }),
        ("address-byte-burst", { $0.addressByteBurst != $1.addressByteBurst }),
        ("address-fanout-rate", { $0.addressFanoutRate != $1.addressFanoutRate }),
        ("address-fanout-burst", { $0.addressFanoutBurst != $1.addressFanoutBurst }),
        ("address-connection-rate", { $0.addressConnectionRate != $1.addressConnectionRate }),
        ("address-connection-burst", { $0.addressConnectionBurst != $1.addressConnectionBurst }),
        ("rate-abuse-limit", { $0.rateAbuseLimit != $1.rateAbuseLimit }),
        ("max-clients-per-address", { $0.maxClientsPerAddress != $1.maxClientsPerAddress }),
        ("password-attempts", { $0.passwordAttempts != $1.passwordAttempts }),
        ("password-lockout", { $0.passwordLockout != $1.passwordLockout }),
        ("login-attempts-per-account", { $0.accounts.loginAttemptsPerAccount != $1.accounts.loginAttemptsPerAccount }),
        ("login-attempts-per-address", { $0.accounts.loginAttemptsPerAddress != $1.accounts.loginAttemptsPerAddress }),
        ("registrations-per-address", { $0.accounts.registrationsPerAddress != $1.accounts.registrationsPerAddress }),
        ("allow-plain-passwords", { $0.accounts.allowPlainPasswords != $1.accounts.allowPlainPasswords }),
        ("admin-account", { $0.accounts.adminAccounts != $1.accounts.adminAccounts }),
        ("motd", { $0.motd != $1.motd }),
        // Read again on every reload whether or not their names changed: a renewed certificate
        // keeps its file's name.
        ("tls-cert/tls-key", { $0.tls != nil && $1.tls != nil && $0.tls != $1.tls }),
    ]

    /// This configuration with the live settings (`liveSettings`) of `new`, and nothing else of it.
    /// TLS files change only between two TLS configurations: a server started without TLS has no
    /// TLS port to give them to.
    public func applyingLiveSettings(of new: ChatServerConfiguration) -> ChatServerConfiguration {
        var result = self
        result.messageRate = new.messageRate
        result.messageBurst = new.messageBurst
        result.byteRate = new.byteRate
        result.byteBurst = new.byteBurst
        result.addressMessageRate = new.addressMessageRate
        result.addressMessageBurst = new.addressMessageBurst
        result.addressByteRate = new.addressByteRate
        result.addressByteBurst = new.addressByteBurst
        result.addressFanoutRate = new.addressFanoutRate
        result.addressFanoutBurst = new.addressFanoutBurst
        result.addressConnectionRate = new.addressConnectionRate
        result.addressConnectionBurst = new.addressConnectionBurst
        result.rateAbuseLimit = new.rateAbuseLimit
        result.maxClientsPerAddress = new.maxClientsPerAddress
        result.passwordAttempts = new.passwordAttempts
        result.passwordLockout = new.passwordLockout
        result.accounts.loginAttemptsPerAccount = new.accounts.loginAttemptsPerAccount
        result.accounts.loginAttemptsPerAddress = new.accounts.loginAttemptsPerAddress
        result.accounts.registrationsPerAddress = new.accounts.registrationsPerAddress
        result.accounts.allowPlainPasswords = new.accounts.allowPlainPasswords
        result.accounts.adminAccounts = new.accounts.adminAccounts
        result.motd = new.motd
        if tls != nil, let files = new.tls { result.tls = files }
        return result
    }

    /// The flags of the live settings that differ between this configuration and `new`.
    public func liveChanges(to new: ChatServerConfiguration) -> [String] {
        Self.liveSettings.filter { $0.changed(self, new) }.map(\.flag)
    }
}
