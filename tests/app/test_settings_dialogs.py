"""The settings dialogs read and return the values they show."""
from app.storage.app_settings import AppSettings
from app.storage.conversation import Conversation
from app.windows.conversation_settings_dialog import ConversationSettingsDialog
from app.windows.settings_dialog import SettingsDialog


def test_settings_dialog_round_trips_limits_and_defaults(qtbot):
    start = AppSettings(max_num_seqs=8, num_pages=1024, prefill_chunk=256,
                        system_prompt="Be brief.", temperature=0.3, top_p=0.9, max_tokens=200)
    dialog = SettingsDialog(start)
    qtbot.addWidget(dialog)
    assert dialog.settings() == start
    dialog.fields.temperature.setValue(1.1)
    dialog.max_num_seqs.setValue(4)
    out = dialog.settings()
    assert out.temperature == 1.1 and out.max_num_seqs == 4 and out.system_prompt == "Be brief."


def test_conversation_settings_keep_the_title_when_emptied(qtbot):
    conv = Conversation(title="Rivers", system_prompt="", temperature=0.7, top_p=0.95,
                        max_tokens=512)
    dialog = ConversationSettingsDialog(conv)
    qtbot.addWidget(dialog)
    dialog.title.setText("  ")
    dialog.fields.system_prompt.setPlainText("You are a poet.")
    dialog.fields.max_tokens.setValue(64)
    out = dialog.conversation()
    assert out.title == "Rivers" and out.system_prompt == "You are a poet."
    assert out.max_tokens == 64 and out.temperature == 0.7
