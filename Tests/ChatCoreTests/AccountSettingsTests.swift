import ChatCore
import Testing

/// `AccountSettings.problem`: settings a server cannot run with are named before it starts.
@Suite struct AccountSettingsTests {
    /// Argon2id (libsodium) needs at least one pass and 8 KiB; `PasswordHashing` traps below
    /// them, so the settings refuse them first.
    @Test func hashingBelowArgon2idsLeastIsAProblem() {
        #expect(AccountSettings().problem == nil)
        var settings = AccountSettings()
        settings.hashingPasses = 0
        #expect(settings.problem == "password hashing needs at least 1 pass and 8 KiB of memory")
        settings = AccountSettings()
        settings.hashingMemoryBytes = (8 << 10) - 1
        #expect(settings.problem == "password hashing needs at least 1 pass and 8 KiB of memory")
        settings.hashingMemoryBytes = 8 << 10
        settings.hashingPasses = 1
        #expect(settings.problem == nil)
    }
}
