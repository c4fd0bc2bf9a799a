import ChatClient
import Testing

@Suite struct LineEditorTests {
    private func editor(_ typed: String = "", maxLineBytes: Int = 100, history: [String] = []) -> LineEditor {
        var editor = LineEditor(prompt: "> ", maxLineBytes: maxLineBytes, history: history)
        if !typed.isEmpty { _ = editor.handle(.text(typed)) }
        return editor
    }

    @Test func readlineWordAndLineKills() {
        var line = editor("one two-three four")
        _ = line.handle(.control("w"))
        #expect(line.text == "one two-three ", "Ctrl-W deletes the word before the cursor")
        _ = line.handle(.control("w"))
        #expect(line.text == "one ", "up to whitespace, as readline's unix-word-rubout")
        _ = line.handle(.control("y"))
        #expect(line.text == "one two-three ", "Ctrl-Y yanks it back")
        _ = line.handle(.alt("\u{7F}"))
        #expect(line.text == "one two-", "Alt-Backspace deletes a word of letters and digits")
        _ = line.handle(.home)
        _ = line.handle(.control("k"))
        #expect(line.text.isEmpty)
    }

    @Test func typingStopsAtTheFrameLimitAndSaysSoOnce() {
        var line = editor(maxLineBytes: 10)
        #expect(line.handle(.text("12345678")).isEmpty)
        let first = line.handle(.text("abcd"))
        #expect(line.text == "12345678ab", "what fits is typed")
        #expect(first.count == 1, "one note: \(first)")
        #expect(line.handle(.text("x")).isEmpty, "the note is not repeated")
        #expect(line.handle(.paste("zz")).count == 1, "a paste that does not fit is refused whole")
        #expect(line.text == "12345678ab")
        _ = line.handle(.enter)
        #expect(line.handle(.text("é")).isEmpty, "a new line starts empty")
    }

    @Test func aSingleLinePasteIsInsertedAndSeveralLinesAreHandedOn() {
        var line = editor("say: ")
        #expect(line.handle(.paste("/part\n")).isEmpty, "one line (and its line break) is text in the line")
        #expect(line.text == "say: /part")
        #expect(line.handle(.paste("a\nb")) == [.paste("a\nb")])
        #expect(line.text == "say: /part", "the typed line is untouched")
    }

    @Test func ctrlCClearsThenASecondOneInterrupts() {
        var line = editor("draft")
        #expect(line.handle(.control("c")).count == 1, "a note says how to quit")
        #expect(line.text.isEmpty)
        #expect(line.handle(.control("c")) == [.interrupt])

        var fresh = editor()
        #expect(fresh.handle(.control("c")).count == 1, "on an empty line the first only warns")
        _ = fresh.handle(.text("x"))
        _ = fresh.handle(.backspace)
        #expect(fresh.handle(.control("c")) != [.interrupt], "another key in between disarms it")
        #expect(fresh.handle(.control("c")) == [.interrupt])
    }

    @Test func ctrlDEndsInputOnlyOnAnEmptyLine() {
        var line = editor("ab")
        _ = line.handle(.home)
        #expect(line.handle(.control("d")).isEmpty)
        #expect(line.text == "b", "deletes under the cursor")
        _ = line.handle(.control("d"))
        #expect(line.handle(.control("d")) == [.endOfInput])
    }

    @Test func historyWalksAndKeepsTheLineBeingTyped() {
        var line = editor("new", history: ["first", "second"])
        _ = line.handle(.up)
        #expect(line.text == "second")
        _ = line.handle(.up)
        _ = line.handle(.up)
        #expect(line.text == "first", "stops at the oldest")
        _ = line.handle(.down)
        _ = line.handle(.down)
        #expect(line.text == "new", "the line being typed comes back")
        #expect(line.handle(.enter) == [.submit("new")])
        #expect(line.history == ["first", "second", "new"])
    }

    @Test func ctrlRSearchesReadablyAndCancels() {
        var line = editor("draft", history: ["/join #swift", "hello", "/join #rust"])
        _ = line.handle(.control("r"))
        _ = line.handle(.text("join"))
        #expect(line.layout(columns: 80).row == "(history search) “join”: /join #rust")
        _ = line.handle(.control("r"))
        #expect(line.layout(columns: 80).row == "(history search) “join”: /join #swift", "Ctrl-R again finds an older one")
        _ = line.handle(.control("g"))
        #expect(line.text == "draft", "Ctrl-G gives the line back")
        _ = line.handle(.control("r"))
        _ = line.handle(.text("hel"))
        #expect(line.handle(.enter) == [.submit("hello")], "Enter runs the line found")
    }

    @Test func layoutPutsTheCursorAfterWideCharacters() {
        var line = editor("日本😀ab")
        _ = line.handle(.left)
        _ = line.handle(.left)
        let (row, cursor) = line.layout(columns: 80)
        #expect(row == "> 日本😀ab")
        #expect(cursor == 2 + 6, "prompt 2 + 日本😀 6 cells")
    }

    @Test func aLongLineScrollsAndNeverFillsTheLastColumn() {
        var line = editor(String(repeating: "漢", count: 60), maxLineBytes: 1000)
        for columns in [10, 20, 41, 80] {
            let (row, cursor) = line.layout(columns: columns)
            #expect(TerminalText.cellWidth(of: row) <= columns - 1, "\(columns) columns: the row fits: \(row)")
            #expect(cursor <= columns - 1, "the cursor is in view")
        }
        _ = line.handle(.home)
        #expect(line.layout(columns: 20).row.hasPrefix("> 漢漢"), "Home scrolls back to the start")
        #expect(line.layout(columns: 20).cursorColumn == 2)
    }

    @Test func questionsTakeOneKey() {
        var line = editor("kept")
        line.ask("send 5 lines? (y/n) ")
        #expect(line.layout(columns: 80).row == "send 5 lines? (y/n) ")
        #expect(line.handle(.text("y")) == [.answer(true)])
        #expect(line.text == "kept")
        line.ask("again? ")
        #expect(line.handle(.enter) == [.answer(false)], "anything but y declines")
    }

    @Test func tabCompletesOneCandidateAndListsSeveral() {
        var line = editor("hi al")
        _ = line.handle(.tab) { word, before in
            #expect(word == "al" && before == "hi ")
            return ["alice"]
        }
        #expect(line.text == "hi alice ")
        _ = line.handle(.text("b"))
        let actions = line.handle(.tab) { _, _ in ["bob", "bea"] }
        #expect(actions == [.note("bob  bea")], "no common prefix longer than the word: the candidates are listed")
    }
}
