/// The line being typed, as a value: keys in, edits and requests out, and the row to draw.
///
/// Emacs/readline keys: Ctrl-A/E/B/F, Ctrl-Left/Right and Alt-b/f move; Backspace, Delete,
/// Ctrl-D, Ctrl-W (readline's `unix-word-rubout`: the word before the cursor up to whitespace),
/// Alt-Backspace, Alt-d, Ctrl-K and Ctrl-U delete, the last kill coming back with Ctrl-Y;
/// Up/Down walk the history and Ctrl-R searches it; Tab completes. Ctrl-C clears the line and
/// a second Ctrl-C on the empty line asks to quit; Ctrl-D on an empty line ends input. Alt-1…9,
/// Ctrl-N and Ctrl-P ask for another window.
///
/// The editor owns no terminal: `layout(columns:)` gives the one row to show (prompt and the
/// part of the line around the cursor, scrolled sideways when the line is wider than the
/// terminal) and the cursor's column, measured with `TerminalText.cellWidth`.
public struct LineEditor: Sendable {
    /// What the editor asks its owner to do.
    public enum Action: Equatable, Sendable {
        /// The user pressed Enter on this line.
        case submit(String)
        /// The user pasted several lines (or one ending in a line break): text to send as is.
        case paste(String)
        /// Ctrl-C on an empty line right after another Ctrl-C: leave.
        case interrupt
        /// Ctrl-D on an empty line: leave.
        case endOfInput
        /// Alt-1…9 (and Alt-0 for 10): show window number n (from 1).
        case selectWindow(Int)
        /// Ctrl-N: the next window.
        case nextWindow
        /// Ctrl-P: the previous window.
        case previousWindow
        /// Something to tell the user above the line (a refused insertion, completions).
        case note(String)
        /// The answer to the question set with `ask`: true for y or Y.
        case answer(Bool)
        /// Ctrl-L: draw the whole screen again.
        case redrawScreen
    }

    /// The prompt shown before the line.
    public var prompt: String
    /// The most UTF-8 bytes the line may hold (what one frame can carry); typing stops there.
    public var maxLineBytes: Int
    /// Lines entered before, oldest first.
    public private(set) var history: [String]
    /// The line's characters (grapheme clusters).
    public private(set) var characters: [Character] = []
    /// Where the cursor is: an index into `characters`.
    public private(set) var cursor = 0

    private let historyLimit: Int
    private var killed = ""
    private var historyIndex: Int?
    private var stash: [Character] = []
    private var search: HistorySearch?
    private var question: String?
    private var interruptArmed = false
    private var fullNoted = false
    private var scroll = 0

    /// An editor showing `prompt`, with `history` (oldest first, at most `historyLimit` kept).
    public init(prompt: String, maxLineBytes: Int = 16_000, history: [String] = [], historyLimit: Int = 1000) {
        self.prompt = prompt
        self.maxLineBytes = maxLineBytes
        self.historyLimit = historyLimit
        self.history = Array(history.suffix(historyLimit))
    }

    /// The line as text.
    public var text: String { String(characters) }

    /// Whether a question is waiting for its answer.
    public var isAsking: Bool { question != nil }

    /// Shows `question` in place of the prompt; the next key answers it (`answer(true)` for y).
    public mutating func ask(_ question: String) {
        search = nil
        self.question = question
    }

    // MARK: Keys

    /// Applies `key`. `complete` gives the candidates for the word before the cursor, given
    /// the text before that word.
    public mutating func handle(_ key: Key, complete: (_ word: String, _ lineBefore: String) -> [String] = { _, _ in [] }) -> [Action] {
        if question != nil {
            if case .paste = key { return [] }
            question = nil
            if case .text(let typed) = key, typed == "y" || typed == "Y" { return [.answer(true)] }
            return [.answer(false)]
        }
        let wasArmed = interruptArmed
        interruptArmed = false
        if search != nil, let actions = handleInSearch(key) { return actions }

        switch key {
        case .text(let typed):
            return insert(typed, whole: false)
        case .paste(let pasted):
            // One line (perhaps with the line break a copy picks up) is text for the line;
            // several lines are a paste for the owner, never commands.
            var body = Substring(pasted)
            if body.hasSuffix("\n") { body = body.dropLast() }
            if body.contains("\n") { return [.paste(pasted)] }
            return body.isEmpty ? [] : insert(String(body), whole: true)
        case .pasteTooLarge(let bytes):
            return [.note("a paste of \(bytes) bytes is more than the client keeps; nothing was pasted")]
        case .enter:
            let line = text
            addToHistory(line)
            clear()
            return [.submit(line)]
        case .tab:
            return completeWord(complete)
        case .backspace:
            if cursor > 0 {
                characters.remove(at: cursor - 1)
                cursor -= 1
            }
        case .delete:
            if cursor < characters.count { characters.remove(at: cursor) }
        case .left:
            cursor = max(0, cursor - 1)
        case .right:
            cursor = min(characters.count, cursor + 1)
        case .home:
            cursor = 0
        case .end:
            cursor = characters.count
        case .wordLeft:
            cursor = wordStart(before: cursor, isWord: Self.isWordCharacter)
        case .wordRight:
            cursor = wordEnd(after: cursor)
        case .up:
            recallOlder()
        case .down:
            recallNewer()
        case .pageUp, .pageDown, .escape:
            break
        case .alt(let character):
            return altKey(character)
        case .control(let letter):
            return controlKey(letter, wasArmed: wasArmed)
        }
        return []
    }

    private mutating func controlKey(_ letter: Character, wasArmed: Bool) -> [Action] {
        switch letter {
        case "a": cursor = 0
        case "e": cursor = characters.count
        case "b": cursor = max(0, cursor - 1)
        case "f": cursor = min(characters.count, cursor + 1)
        case "d":
            if characters.isEmpty { return [.endOfInput] }
            if cursor < characters.count { characters.remove(at: cursor) }
        case "k": kill(cursor..<characters.count)
        case "u": kill(0..<cursor)
        case "w": kill(wordStart(before: cursor) { !$0.isWhitespace }..<cursor)
        case "y": insertKilled()
        case "c":
            if characters.isEmpty {
                if wasArmed { return [.interrupt] }
                interruptArmed = true
                return [.note("press Ctrl-C again to quit (or type /quit)")]
            }
            killed = text
            clear()
            interruptArmed = true
            return [.note("line cleared (Ctrl-Y brings it back); press Ctrl-C again to quit")]
        case "r":
            search = HistorySearch(saved: characters, savedCursor: cursor)
        case "l": return [.redrawScreen]
        case "n": return [.nextWindow]
        case "p": return [.previousWindow]
        default: break
        }
        return []
    }

    private mutating func altKey(_ character: Character) -> [Action] {
        switch character {
        case "1"..."9": return [.selectWindow(Int(String(character))!)]
        case "0": return [.selectWindow(10)]
        case "\u{7F}": kill(wordStart(before: cursor, isWord: Self.isWordCharacter)..<cursor)
        case "d": kill(cursor..<wordEnd(after: cursor))
        default: break
        }
        return []
    }

    // MARK: Editing

    /// Inserts `typed` at the cursor, within `maxLineBytes`. A paste (`whole`) goes in whole or
    /// not at all; typed text goes in as far as it fits, and the first refusal says why.
    private mutating func insert(_ typed: String, whole: Bool) -> [Action] {
        let room = maxLineBytes - text.utf8.count
        if typed.utf8.count <= room {
            characters.insert(contentsOf: typed, at: cursor)
            cursor += typed.count
            return []
        }
        let limit = "a message can hold at most \(maxLineBytes) bytes (the server's frame limit)"
        if whole {
            return [.note("not pasted: the line would be \(text.utf8.count + typed.utf8.count) bytes; \(limit)")]
        }
        var fitting = ""
        var used = 0
        for character in typed {
            let size = character.utf8.count
            if used + size > room { break }
            used += size
            fitting.append(character)
        }
        characters.insert(contentsOf: fitting, at: cursor)
        cursor += fitting.count
        guard !fullNoted else { return [] }
        fullNoted = true
        return [.note("the line is full: \(limit); the rest was not typed")]
    }

    private mutating func kill(_ range: Range<Int>) {
        guard !range.isEmpty else { return }
        killed = String(characters[range])
        characters.removeSubrange(range)
        cursor = range.lowerBound
    }

    private mutating func insertKilled() {
        _ = insert(killed, whole: true)
    }

    private mutating func clear() {
        characters = []
        cursor = 0
        scroll = 0
        historyIndex = nil
        fullNoted = false
    }

    private mutating func replaceLine(with line: [Character]) {
        characters = line
        cursor = line.count
    }

    /// The start of the word that ends at `index`: back over characters that are not part of
    /// a word, then over those that are.
    private func wordStart(before index: Int, isWord: (Character) -> Bool) -> Int {
        var start = index
        while start > 0, !isWord(characters[start - 1]) { start -= 1 }
        while start > 0, isWord(characters[start - 1]) { start -= 1 }
        return start
    }

    private func wordEnd(after index: Int) -> Int {
        var end = index
        while end < characters.count, !Self.isWordCharacter(characters[end]) { end += 1 }
        while end < characters.count, Self.isWordCharacter(characters[end]) { end += 1 }
        return end
    }

    private static func isWordCharacter(_ character: Character) -> Bool {
        character.isLetter || character.isNumber || character == "_"
    }

    // MARK: Completion

    private mutating func completeWord(_ complete: (String, String) -> [String]) -> [Action] {
        let start = wordStart(before: cursor) { !$0.isWhitespace }
        guard start < cursor || cursor == 0 else { return [] }
        let word = String(characters[start..<cursor])
        let before = String(characters[0..<start])
        let candidates = complete(word, before)
        guard !candidates.isEmpty else { return [] }
        let replacement = candidates.count == 1 ? candidates[0] + " " : CompletionCandidates.commonPrefix(of: candidates)
        if replacement.count > word.count || candidates.count == 1 {
            characters.replaceSubrange(start..<cursor, with: replacement)
            cursor = start + replacement.count
            return []
        }
        return [.note(candidates.joined(separator: "  "))]
    }

    // MARK: History

    private mutating func addToHistory(_ line: String) {
        guard !line.allSatisfy(\.isWhitespace), history.last != line else { return }
        history.append(line)
        if history.count > historyLimit { history.removeFirst(history.count - historyLimit) }
    }

    private mutating func recallOlder() {
        guard !history.isEmpty else { return }
        let index: Int
        if let current = historyIndex {
            guard current > 0 else { return }
            index = current - 1
        } else {
            stash = characters
            index = history.count - 1
        }
        historyIndex = index
        replaceLine(with: Array(history[index]))
    }

    private mutating func recallNewer() {
        guard let current = historyIndex else { return }
        if current + 1 < history.count {
            historyIndex = current + 1
            replaceLine(with: Array(history[current + 1]))
        } else {
            historyIndex = nil
            replaceLine(with: stash)
        }
    }

    /// Ctrl-R's state: what is searched for, the entry found, and the line to go back to.
    private struct HistorySearch: Sendable {
        var query = ""
        var match: Int?
        var failed = false
        let saved: [Character]
        let savedCursor: Int
    }

    /// Handles `key` while searching; nil when the key ends the search and should then act as
    /// usual on the line found.
    private mutating func handleInSearch(_ key: Key) -> [Action]? {
        guard var state = search else { return nil }
        switch key {
        case .text(let typed):
            state.query += typed
            find(&state, from: state.match ?? history.count - 1)
        case .backspace:
            if !state.query.isEmpty { state.query.removeLast() }
            find(&state, from: history.count - 1)
        case .control("r"):
            find(&state, from: (state.match ?? history.count) - 1)
        case .control("g"), .control("c"), .escape:
            search = nil
            characters = state.saved
            cursor = state.savedCursor
            return []
        case .enter:
            search = nil
            let line = state.match.map { history[$0] } ?? String(state.saved)
            clear()
            addToHistory(line)
            return line.isEmpty ? [] : [.submit(line)]
        default:
            // Any other key takes the line found and then does what it does.
            search = nil
            if let match = state.match { replaceLine(with: Array(history[match])) }
            return nil
        }
        search = state
        return []
    }

    private func find(_ state: inout HistorySearch, from start: Int) {
        guard !state.query.isEmpty else {
            state.match = nil
            state.failed = false
            return
        }
        var index = min(start, history.count - 1)
        while index >= 0 {
            if history[index].lowercased().contains(state.query.lowercased()) {
                state.match = index
                state.failed = false
                return
            }
            index -= 1
        }
        state.failed = true
    }

    // MARK: Layout

    /// The row to show on a terminal `columns` wide: the prompt (or the question, or the
    /// search) and the part of the line around the cursor, and the cursor's column (from 0).
    /// Nothing is drawn in the last column, so the row never wraps.
    public mutating func layout(columns: Int) -> (row: String, cursorColumn: Int) {
        let shownPrompt: String
        var shown = characters
        var shownCursor = cursor
        if let question {
            shownPrompt = question
            shown = []
            shownCursor = 0
        } else if let search {
            let match = search.match.map { history[$0] } ?? ""
            shownPrompt = "(history search\(search.failed ? ", no more matches" : "")) “\(search.query)”: "
            shown = Array(match)
            shownCursor = shown.count
        } else {
            shownPrompt = prompt
        }
        let usable = max(1, columns - 1)
        let promptText = TerminalText.prefix(of: TerminalText.sanitized(shownPrompt), fitting: max(0, usable - 8))
        let available = usable - TerminalText.cellWidth(of: promptText)
        let cells = shown.map { TerminalText.sanitized(String($0)) }
        let widths = cells.map { TerminalText.cellWidth(of: $0) }

        // Scroll sideways so the cursor stays in view, with a third of the row of context.
        scroll = min(scroll, shownCursor)
        var width = widths[scroll..<shownCursor].reduce(0, +)
        if width >= available {
            var start = shownCursor
            width = 0
            while start > 0, width + widths[start - 1] < available * 2 / 3 {
                start -= 1
                width += widths[start]
            }
            scroll = start
        } else if scroll > 0, scroll == shownCursor {
            var start = shownCursor
            while start > 0, widths[(start - 1)..<shownCursor].reduce(0, +) < available / 3 { start -= 1 }
            scroll = start
        }
        var row = promptText
        var used = 0
        var cursorColumn = TerminalText.cellWidth(of: promptText)
        for index in scroll..<cells.count {
            if index == shownCursor { cursorColumn += used }
            if used + widths[index] > available { break }
            row += cells[index]
            used += widths[index]
        }
        if shownCursor == cells.count { cursorColumn = TerminalText.cellWidth(of: promptText) + used }
        return (row, cursorColumn)
    }
}
