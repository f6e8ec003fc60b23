"""The settings dialogs read and return the values they show, one field per
setting of engine/settings_spec.py."""
from app.storage.app_settings import AppSettings
from app.storage.conversation import Conversation
from app.windows.conversation_settings_dialog import ConversationSettingsDialog
from app.windows.settings_dialog import SettingsDialog
from engine.settings_spec import SETTINGS


def test_settings_dialog_round_trips_limits_and_defaults(qtbot):
    start = AppSettings(max_num_seqs=8, kv_budget_mb=1024, prefill_chunk=256).with_chat(
        system_prompt="Be brief.", temperature=0.3, top_p=0.9, max_tokens=200, seed=7)
    dialog = SettingsDialog(start)
    qtbot.addWidget(dialog)
    assert dialog.settings() == start
    dialog.fields.widgets["temperature"].setValue(1.1)
    dialog.fields.widgets["seed"].setValue(-1)        # shown as "Random"
    dialog.max_num_seqs.setValue(4)
    out = dialog.settings()
    assert out.chat["temperature"] == 1.1 and out.chat["seed"] is None
    assert out.max_num_seqs == 4 and out.chat["system_prompt"] == "Be brief."


def test_kv_budget_zero_means_automatic(qtbot):
    dialog = SettingsDialog(AppSettings(kv_budget_mb=None))
    qtbot.addWidget(dialog)
    assert dialog.kv_budget_mb.value() == 0
    assert dialog.kv_budget_mb.text().startswith("Automatic")
    assert dialog.settings().kv_budget_mb is None
    assert dialog.settings().engine_config().kv_budget_mb is None
    dialog.kv_budget_mb.setValue(2048)
    assert dialog.settings().engine_config().kv_budget_mb == 2048


def test_every_setting_has_a_labelled_field(qtbot):
    dialog = ConversationSettingsDialog(Conversation())
    qtbot.addWidget(dialog)
    assert list(dialog.fields.widgets) == [s.name for s in SETTINGS]
    assert all(w.toolTip() for w in dialog.fields.widgets.values())
    assert dialog.fields.values() == Conversation().settings


def test_conversation_settings_keep_the_title_when_emptied(qtbot):
    conv = Conversation(title="Rivers", settings={"system_prompt": "", "temperature": 0.7,
                                                  "top_p": 0.95, "max_tokens": 512})
    dialog = ConversationSettingsDialog(conv)
    qtbot.addWidget(dialog)
    dialog.title.setText("  ")
    dialog.fields.widgets["system_prompt"].setPlainText("You are a poet.")
    dialog.fields.widgets["max_tokens"].setValue(64)
    dialog.fields.widgets["top_k"].setValue(40)
    out = dialog.conversation()
    assert out.title == "Rivers" and out.system_prompt == "You are a poet."
    assert out.settings["max_tokens"] == 64 and out.settings["temperature"] == 0.7
    params = out.sampling_params()
    assert (params.max_tokens, params.top_k, params.top_p) == (64, 40, 0.95)
