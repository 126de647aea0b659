"""The synthetic visual tasks: seeded, train and held-out disjoint by picture, and a task that runs
out of distinct layouts says so instead of drawing forever."""

import pytest

from tempering.data.images import image_digest, load_image
from tempering.data.vision_tasks import CHANCE, VISION_TASKS, layout_split, vision_tasks


def _digests(tasks):
    return {image_digest(load_image(t.chat()[0]["content"][0]["image_url"]["url"])) for t in tasks}


@pytest.mark.parametrize("name", sorted(VISION_TASKS))
def test_train_and_heldout_pictures_are_disjoint_and_seeded(name):
    train = vision_tasks(name, 120, seed=3, split="train", size=48)
    held = vision_tasks(name, 30, seed=3, split="heldout", size=48)
    assert not _digests(train) & _digests(held)
    assert len(_digests(train)) == 120  # every training picture is a different one
    again = vision_tasks(name, 120, seed=3, split="train", size=48)
    assert [t.chat() for t in again] == [t.chat() for t in train]
    assert 0 < CHANCE[name] < 1


def test_ui_buttons_have_thousands_of_training_layouts():
    # with 3 of 6 words and a target alone there were 360 layouts (288 in train): asking for 2,000 drew forever
    tasks = vision_tasks("ui_button", 2000, seed=0, split="train", size=48)
    assert len(_digests(tasks)) == 2000
    assert {t.verifier["answer"] for t in tasks} == {"1", "2", "3"}


def test_a_task_out_of_layouts_is_a_one_line_error():
    with pytest.raises(ValueError, match=r"vision task 'colour_shape': only \d+ distinct heldout layouts"):
        vision_tasks("colour_shape", 100_000, seed=0, split="heldout", size=16)


def test_a_layout_belongs_to_one_split_whatever_the_seed():
    assert {layout_split(("red", "circle", i, 2, 2)) for i in range(200)} == {"train", "heldout"}
    assert layout_split(("red", "circle", 7, 2, 2)) == layout_split(("red", "circle", 7, 2, 2))
