"""Images and videos in prompts: reading them from data records, the model's processor, and
prompt tokens with the right number of image and video tokens (``--multimodal-keys``)."""
