import ChatProtocol

/// What Tab offers for the word under the cursor: command names, room names or nicks,
/// depending on where the word stands in the line.
public enum CompletionCandidates {
    /// The completions of `word`, given the text before it on the line (`lineBefore`), the
    /// nicks and rooms we know (rooms without `#`) and the open windows' titles (`#general`,
    /// `bob`). Matching ignores letter case; candidates keep the spelling they were given in,
    /// without duplicates, in the order given.
    ///
    /// - A word starting with `/` at the start of the line completes a command (`/jo` → `/join`).
    /// - A word starting with `#`, or the first argument of a room command, completes a room.
    /// - The first argument of `/window` completes its words (`list`, `close`, `goto`) and the
    ///   open windows (every known room and nick when no windows are given).
    /// - Anything else completes a nick; at the start of the line the nick gets a `:` so the
    ///   line reads as addressed to that person, as in IRC clients.
    /// - An empty word completes only a command's first argument (`/window ` then Tab lists
    ///   the windows); after free text it offers nothing.
    public static func candidates(for word: String, lineBefore: String, nicks: [String], rooms: [String], windows: [String] = []) -> [String] {
        let previousWords = lineBefore.split(whereSeparator: \.isWhitespace)
        let atLineStart = previousWords.isEmpty

        if atLineStart, word.hasPrefix("/") {
            return matching(word, CommandSpec.all.map { "/" + $0.name })
        }
        var argument = CommandSpec.ArgumentKind.text
        if previousWords.count == 1, let first = previousWords.first, first.hasPrefix("/"),
            let spec = CommandSpec.named(String(first.dropFirst()))
        {
            argument = spec.argument
        }
        if word.isEmpty, !atLineStart, argument == .text { return [] }
        if word.hasPrefix("#") || argument == .room {
            let bare = word.hasPrefix("#") ? String(word.dropFirst()) : word
            return matching(bare, rooms).map { "#" + $0 }
        }
        if argument == .window {
            return matching(word, CommandSpec.windowWords + (windows.isEmpty ? rooms.map { "#" + $0 } + nicks : windows))
        }
        if argument == .command {
            return matching(word, CommandSpec.all.map(\.name))
        }
        let names = matching(word, nicks)
        return atLineStart ? names.map { $0 + ":" } : names
    }

    /// The longest prefix that all `candidates` share, comparing letters without case when
    /// they differ only in case (the first candidate's spelling wins).
    public static func commonPrefix(of candidates: [String]) -> String {
        guard var prefix = candidates.first.map(Array.init) else { return "" }
        for candidate in candidates.dropFirst() {
            let other = Array(candidate)
            var length = 0
            while length < prefix.count, length < other.count,
                prefix[length].lowercased() == other[length].lowercased()
            {
                length += 1
            }
            prefix = Array(prefix.prefix(length))
        }
        return String(prefix)
    }

    private static func matching(_ word: String, _ options: [String]) -> [String] {
        let key = word.lowercased()
        var seen: Set<String> = []
        return options.filter { option in
            option.lowercased().hasPrefix(key) && seen.insert(option.lowercased()).inserted
        }
    }
}
